"""What a preflight row records when the API server turns its reads away, from the client's
ApiException to summary.json: the server's answer travels with the check's result (also through
the JSON an xdist run shares), gives the row its code (403: permission-denied; a 429 or 5xx that
stood: api-throttled, not a timeout) and the row's summary is its reason in every channel.  No
cluster: the answers are the client's exceptions, raised by a stand-in for its API groups."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from draconf import preflight as pf
from draconf.answers import carried_by
from draconf.diagnosis import Failure
from draconf.preflight import BLOCKING, CheckResult
from draconf.profile import builtin

pytest_plugins = ["pytester"]

SUITE = Path(__file__).resolve().parents[2] / "suites" / "test_preflight.py"
FORBIDDEN = ('deviceclasses.resource.k8s.io is forbidden: User "ci" cannot list resource "deviceclasses" '
             'in API group "resource.k8s.io" at the cluster scope')


class Answering:
    """An Api whose every group's every call gets the same refusal from the server."""

    def __init__(self, status: int, reason: str, message: str = ""):
        body = json.dumps({"kind": "Status", "code": status, "message": message}) if message else None
        self.error = ApiException(status=status, reason=reason)
        self.error.body = body

    def __getattr__(self, group):
        error = self.error

        class Group:
            def __getattr__(self, call):
                def refuse(*args, **kwargs):
                    raise error
                return refuse
        return Group()


def read(check: str, api) -> CheckResult:
    """The check's result as another xdist worker reads it back from the shared file."""
    return CheckResult.from_dict(json.loads(json.dumps(pf.run_check(check, api, builtin("nvidia")).as_dict())))


def test_the_servers_answer_gives_an_inconclusive_row_its_code():
    throttled = read("server-version", Answering(429, "Too Many Requests", "too many requests, retry later"))
    assert throttled.inconclusive and not throttled.unreachable
    assert throttled.no_verdict_code == "api-throttled"
    assert [a.status for a in throttled.answers] == [429]
    assert read("server-version", Answering(503, "Service Unavailable")).no_verdict_code == "api-throttled"
    forbidden = read("device-class", Answering(403, "Forbidden", FORBIDDEN))
    assert forbidden.no_verdict_code == "permission-denied"
    assert forbidden.summary.startswith("forbidden: the credentials in use lack `list` on deviceclasses")
    # Neither forbidden nor busy: no code of the row's own, the diagnosis reads the answer.
    broken = read("device-class", Answering(500, "Internal Server Error", "etcdserver: leader changed"))
    assert broken.inconclusive and broken.no_verdict_code is None
    assert [str(a) for a in broken.answers] == ["500 Internal Server Error: etcdserver: leader changed"]


def test_the_exception_an_inconclusive_row_raises_carries_the_answer_to_the_diagnosis():
    busy = read("server-version", Answering(429, "Too Many Requests"))
    raised = pf.Inconclusive("server-version could not be evaluated: ...", busy.evidence, answers=busy.answers)
    assert carried_by(raised) == busy.answers
    assert Failure.of(raised).answers == busy.answers


CONFTEST = """
import json, os
import pytest
from draconf.preflight import CheckResult
from draconf.reporting import ReportingPlugin, pytest_addoption  # noqa: F401

def pytest_configure(config):
    config.pluginmanager.register(ReportingPlugin(config), "draconf-reporting")

@pytest.fixture(scope="session")
def preflight():
    return [CheckResult.from_dict(r) for r in json.loads(open(os.environ["PREFLIGHT_READING"]).read())]
"""


def test_a_refused_read_and_a_failure_are_rows_with_their_code_and_reason(pytester, monkeypatch, tmp_path):
    """Forbidden rows were recorded without a reason (summary.json's null, left out of the
    terminal's diagnoses); a standing 429 became a timeout or api-unavailable."""
    by_name = {
        "server-version": read("server-version", Answering(429, "Too Many Requests", "slow down")),
        "device-class": read("device-class", Answering(403, "Forbidden", FORBIDDEN)),
        "resource-api": CheckResult("resource-api", False, BLOCKING, "resource.k8s.io/v1 is not served",
                                    "api-unavailable"),
    }
    reading = [by_name.get(name) or CheckResult(name, True, pf.SEVERITY[name], "fine") for name in pf.CHECKS]
    (tmp_path / "reading.json").write_text(json.dumps([r.as_dict() for r in reading]))
    monkeypatch.setenv("PREFLIGHT_READING", str(tmp_path / "reading.json"))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_rows=f"""
import importlib.util
spec = importlib.util.spec_from_file_location("suite_preflight", {str(SUITE)!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
test_preflight = suite.test_preflight
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--draconf-reports=out")
    rows = {r["id"].split("[", 1)[1].rstrip("]"): r for r in
            json.loads((pytester.path / "out" / "summary.json").read_text())["tests"]}
    for name, code in (("server-version", "api-throttled"), ("device-class", "permission-denied"),
                       ("resource-api", "api-unavailable")):
        assert rows[name]["outcome"] in ("failed", "broken") and rows[name]["diagnosis"] == code, rows[name]
        assert rows[name]["reason"] == by_name[name].summary, rows[name]
        assert f"[{code}] {by_name[name].summary}" in result.stdout.str()  # the terminal's diagnoses
    assert rows["kubelet-plugin"]["outcome"] == "passed" and rows["kubelet-plugin"]["reason"] is None
