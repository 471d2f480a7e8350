"""An interrupted sweep (Ctrl-C, or SIGTERM, which the plugin turns into one) ends with the run:
the targets in flight give up their waits at the next poll instead of sitting out their
timeouts, so the run can delete its namespaces and exit at once."""

from __future__ import annotations

import threading
import time

import pytest

from draconf import waits
from draconf.sweep import Target, run


def test_an_interrupted_sweep_stops_its_targets_waits_at_once():
    targets = [Target(f"n{i}") for i in range(4)]
    gave_up: list[str] = []
    lock = threading.Lock()

    def prove_one(target, proof):
        if target.node == "n0":
            return  # proven at once: its progress line is where the interrupt lands
        try:
            waits.wait_until(f"{target.id} to run", lambda: False, bool, timeout=60, interval=0.1)
        except waits.Cancelled as err:
            with lock:
                gave_up.append(str(err))
            raise

    def progress(line):
        time.sleep(0.3)  # the other targets are in their waits by now
        raise KeyboardInterrupt

    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run(targets, at_once=4, prove_one=prove_one, progress=progress)
    # The pool's threads are not joined on an interrupt; they must end by themselves, quickly.
    deadline = time.monotonic() + 5
    while any(t.name.startswith("sweep") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("sweep")]
    assert time.monotonic() - began < 5
    assert sorted(gave_up) == [f"given up waiting for {n} to run: the run was interrupted" for n in ("n1", "n2", "n3")]


def test_a_wait_outside_an_interrupted_sweep_is_not_given_up():
    """The cancellation is the sweep's threads' alone: a wait of the main thread (or of the
    next sweep) runs to its own end."""
    stop = threading.Event()
    stop.set()
    with waits.cancelled_by(stop):
        pass
    n = iter(range(10))
    assert waits.wait_until("a number above 1", lambda: next(n), lambda v: v > 1, timeout=5, interval=0.01) == 2
