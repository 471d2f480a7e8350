"""`draconf run` against a server that accepts connections and never answers: one line and
exit 12 in seconds (it took 81 s), nothing created.  The server is a local socket; the run is the
real command in a process of its own."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from draconf.errors import EXIT_TARGET_UNUSABLE

#: What the run may take at most: the probe's bounded tries (draconf.preflight.runner.PROBE_TIMEOUT)
#: and the collection check before it, with room for a loaded machine.
WITHIN_SECONDS = 30


@pytest.fixture
def silent_server():
    """A TCP port on 127.0.0.1 whose connections are accepted and never answered; yields the
    port and the connections taken, all closed afterwards."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    taken: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:  # the timeout, to look at stop again
                continue
            taken.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], taken
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in [*taken, listener]:
            conn.close()


def test_a_server_that_never_answers_is_an_unusable_target_in_one_line(silent_server, tmp_path):
    port, taken = silent_server
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "DRACONF_"))}
    env["DRACONF_STATE_DIR"] = str(tmp_path / "state")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "draconf.cli", "run", "--kubeconfig", str(kubeconfig),
                           "--reports", str(tmp_path / "reports")],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    took = time.monotonic() - started
    said = done.stdout + done.stderr
    assert done.returncode == EXIT_TARGET_UNUSABLE, said
    assert taken, "the run never connected to the server"
    assert done.stderr.startswith(f"draconf: error: cannot reach the API server at https://127.0.0.1:{port}"), said
    assert "Traceback" not in said and len(said.strip().splitlines()) <= 3, said
    assert took < WITHIN_SECONDS, f"{took:.1f}s: {said}"
    # Nothing made: no reports, no bed state; only the kubeconfig the test wrote.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kubeconfig"]
