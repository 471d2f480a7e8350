"""The HTML report opens offline: it refers to no host, and a real browser with no network
asks for nothing but the file itself.

The report is built by ``draconf report`` (the pinned Allure, ``npm ci`` from
draconf/allure/package-lock.json on first use; the build itself in a namespace with no network)
from the Allure results of a real pytest run of a tiny suite: one check passes with an
attachment, one fails with a diagnosis.

The browser is Debian's ``chromium``, run headless in a network namespace of its own
(``unshare -n``: no interface but a loopback that is down) or, where that is not allowed,
behind a proxy that points nowhere; ``--log-net-log`` records every request it starts, sent or
not. A request the page made (its initiator is the file, not the browser's own updater) to
anything but ``file:``/``data:``/``blob:`` fails the test. Without chromium the browser tests
skip, naming the package; .ci/run installs it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import draconf
from draconf.htmlreport import ensure_allure_cli, external_references

# The subprocesses import the draconf under test, not whichever one pip last installed.
SAME_DRACONF = {**os.environ, "PYTHONPATH": os.pathsep.join(
    filter(None, [str(Path(draconf.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]))}

SUITE = """
import allure, pytest
from draconf.reporting import record_diagnosis

@pytest.mark.draconf(workload="single-gpu", check="allocation")
def test_allocation():
    allure.attach("kind: Pod\\nmetadata: {name: p}\\n", name="applied manifest",
                  attachment_type=allure.attachment_type.YAML)

@pytest.mark.draconf(workload="single-gpu", check="cdi-injection")
def test_cdi_injection(request):
    record_diagnosis(request.node, "cdi-not-injected", reason="no /dev/nvidia0 in the container")
    assert False, "sees no GPU"
"""

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH: the offline browser check needs Debian's "
                             "`chromium` package (apt-get install chromium; .ci/run installs it)")

# Hosts the Allure app's own code names, as links a user may click (Allure's site, Playwright's
# trace viewer), SVG's namespace, and a localhost default: none is fetched on opening (the
# browser test proves it). A new host here comes with a new Allure pin: look at it.
KNOWN_APP_HOSTS = {"www.w3.org", "allurereport.org", "trace.playwright.dev", "localhost"}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("offline")
    (tmp / "suite").mkdir()
    (tmp / "suite" / "test_tiny.py").write_text(SUITE)
    reports = tmp / "reports"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp / "suite"),
                    "-p", "draconf.pytest_plugin", f"--draconf-reports={reports}",
                    f"--alluredir={reports / 'allure-results'}"],
                   cwd=tmp, capture_output=True, timeout=120, env=SAME_DRACONF)
    assert list((reports / "allure-results").glob("*-result.json")), "the tiny suite left no results"
    # Installed (npm ci, the network) first; then the report builds with no network at all.
    ensure_allure_cli()
    no_network, _ = offline_wrapper()
    proc = subprocess.run([*no_network, sys.executable, "-m", "draconf.cli", "report",
                           "--results", str(reports / "allure-results"), "--output", str(reports / "html")],
                          cwd=tmp, capture_output=True, text=True, timeout=900, env=SAME_DRACONF)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return reports / "html" / "index.html"


def test_the_report_refers_to_no_host_it_would_load(report):
    html = report.read_text()
    assert external_references(html) == []
    assert "googletagmanager" not in html and "gtag(" not in html and "dataLayer" not in html
    # The app itself is inlined (a data: URI); the hosts its code names are links, not loads.
    app = [base64.b64decode(blob).decode(errors="replace") for blob in
           re.findall(r'src="data:text/javascript;base64,([A-Za-z0-9+/=]+)"', html)]
    assert app, "Allure's app is not inlined in the single file any more"
    hosts = {m for code in app for m in re.findall(r"https?://([a-zA-Z0-9.-]+)", code)}
    assert hosts <= KNOWN_APP_HOSTS, hosts - KNOWN_APP_HOSTS


def offline_wrapper() -> tuple[list[str], list[str]]:
    """(command prefix, extra chromium flags) that keep chromium off the network.

    ``unshare -n`` (root) or ``unshare -rn`` (an unprivileged user namespace): no network at
    all. Where neither is allowed, a proxy on a port nothing listens on: every request fails
    at once, and the net log still records it.
    """
    nowhere = ["--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]
    for prefix in (["unshare", "-n", "--"], ["unshare", "-rn", "--"]):
        if shutil.which("unshare") and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix, nowhere
    return [], nowhere


def page_requests(page: Path, workdir: Path) -> tuple[list[str], str]:
    """Open ``page`` in headless chromium with no network; (the URLs the page asked for, its DOM)."""
    prefix, flags = offline_wrapper()
    net_log = workdir / "net-log.json"
    command = [*prefix, CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
               f"--user-data-dir={workdir / 'profile'}", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-extensions",
               "--disable-default-apps", *flags, f"--log-net-log={net_log}",
               "--net-log-capture-mode=Everything", "--virtual-time-budget=15000",
               "--dump-dom", page.as_uri()]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "HOME": str(workdir)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = json.loads(net_log.read_text())
    names = {number: name for name, number in log["constants"]["logEventTypes"].items()}
    requested = []
    for event in log["events"]:
        params = event.get("params") or {}
        if names.get(event["type"]) != "URL_REQUEST_START_JOB" or "url" not in params:
            continue
        # The browser's own background requests (its component updater's clock and update
        # checks) have no origin; whatever the page loads has the file's.
        if params.get("initiator") == "not an origin" and not params.get(
                "network_isolation_key", "").startswith("file:"):
            continue
        requested.append(params["url"])
    return requested, proc.stdout


@needs_chromium
def test_the_browser_check_sees_a_page_that_calls_out(tmp_path):
    """The check itself: a page that loads an image and fetches is caught, with no network."""
    page = tmp_path / "calls-out.html"
    page.write_text('<html><body><img src="https://img.example.invalid/a.png">'
                    '<script>fetch("https://api.example.invalid/x").catch(() => {});</script></body></html>')
    requested, _ = page_requests(page, tmp_path)
    assert {urlsplit(u).hostname for u in requested} >= {"img.example.invalid", "api.example.invalid"}, requested


@needs_chromium
def test_the_report_opened_in_a_browser_with_no_network_requests_nothing(report, tmp_path):
    requested, dom = page_requests(report, tmp_path)
    outside = [u for u in requested if urlsplit(u).scheme not in ("file", "data", "blob")]
    assert outside == [], outside
    # It rendered offline: the app ran and shows both checks.
    assert 'id="app"><div' in dom
    assert "test_allocation" in dom and "test_cdi_injection" in dom
