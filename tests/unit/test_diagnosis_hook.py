"""The diagnosis rules: the plugin's hook in an inner pytest session (no cluster: diagnose_item is
replaced by a stub, so this checks the wiring and the message handling)."""

from __future__ import annotations

from draconf.diagnosis import (
    Failure,
    Snapshot,
    build_facts,
    classify,
)
from draconf.profile import builtin
from tests.unit.diagnosis_facts import (
    A100_SLICE,
    DRIVER,
    GPU_CLASS,
    H100_MIG_SLICE,
    HOOK_CONFTEST,
    HOOK_TESTS,
    MIG_CLASS,
    UNTOLERATED_CLAIM,
    _claim_on,
    _consumer,
    _mig_same_parent_bed,
    _ruled,
    _tainted_snapshot,
    bound_not_running,
    changed,
    healthy,
    pending,
    with_workload,
)

pytest_plugins = ["pytester"]


def test_hook_records_and_prefixes_every_failure(pytester, monkeypatch):
    import json
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(HOOK_CONFTEST)
    pytester.makepyfile(test_hooked=HOOK_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--draconf-reports=out")
    result.assert_outcomes(failed=5, skipped=1, errors=2)
    rows = {r["id"].split("::", 1)[1]: r for r in
            json.loads((pytester.path / "out" / "summary.json").read_text())["tests"]}
    assert rows["test_fails"]["diagnosis"] == "cdi-wrong-device"
    assert rows["test_fails"]["message"].startswith("[cdi-wrong-device] CDI injection is wrong")
    assert rows["test_breaks"]["outcome"] == "broken"
    assert rows["test_breaks"]["message"] == "RuntimeError: [cdi-wrong-device] apiserver answered 500"
    assert rows["test_explains_itself"]["diagnosis"] == "timeout"
    assert rows["test_has_its_own_prefix"]["diagnosis"] == "quota-not-enforced"
    assert rows["test_has_its_own_prefix"]["message"] == "[quota-not-enforced] second claim admitted"
    # A code is data the check raises (CheckFailed.code), never read back out of its words.
    assert rows["test_only_words_in_brackets"]["diagnosis"] == "cdi-wrong-device"
    assert rows["test_skips"]["diagnosis"] is None
    for name in ("TestShared::test_one", "TestShared::test_two"):
        assert rows[name]["outcome"] == "error" and rows[name]["diagnosis"] == "cdi-wrong-device"
    # The reason shows on the terminal once per failure, even for a re-raised fixture error.
    # Counted in the failure reports only: on CI (env CI or BUILD_NUMBER set) pytest's short
    # summary repeats whole multi-line messages, elsewhere just their first line.
    reports = result.stdout.str().split("short test summary info")[0]
    assert reports.count("diagnosis (cdi-wrong-device): container sees GPU-b") == 5
    # ... in a section of the report; the exception is shown as it was raised.
    assert reports.count("draconf diagnosis") == 7
    assert "E       RuntimeError: apiserver answered 500" in reports
    assert "E       IndexError: list index out of range" in reports
    assert "[cdi-wrong-device]" not in reports.split("draconf conformance matrix")[0]


def test_build_facts_reads_what_containers_saw_quota_counts_and_a_competing_device_plugin():
    claim = {"metadata": {"name": "c", "namespace": "ns"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"driver": DRIVER, "pool": "n1", "device": "gpu-0", "request": "gpu"}]}}}}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "p1"},
           "spec": {"nodeName": "n1", "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}],
                    "containers": [{"name": "w", "resources": {"claims": [{"name": "gpu"}]}}, {"name": "side"}]},
           "status": {"phase": "Running"}}
    snap = Snapshot(
        namespace="ns", pods=[pod], claims=[claim, dict(claim, metadata={"name": "d", "namespace": "ns"})],
        slices=[{"spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1"}, "devices": [
            {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-0"}}}]}}],
        nodes=[{"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}],
        gpu_cluster={"metadata": {"name": "gpu-cluster"}},
        cluster_policies=[{"metadata": {"name": "cluster-policy"}, "spec": {"devicePlugin": {"enabled": True}}}],
        containers={"p/w": {"stdout": "GPU 0: NVIDIA H100 (UUID: GPU-9)\n", "stderr": "", "exit_code": 0, "error": ""},
                    "p/side": {"stdout": "", "stderr": "", "exit_code": 127,
                               "error": 'exec: "nvidia-smi": executable file not found in $PATH'}},
        quotas=[{"metadata": {"name": "q", "namespace": "ns"}, "status": {"hard": {
            "count/resourceclaims.resource.k8s.io": "1", f"{DRIVER}.deviceclass.resource.k8s.io/devices": "3"}}}])
    facts = build_facts(snap, builtin("nvidia"))
    w, side = facts.containers
    assert (w.claims, w.expected, w.seen, w.no_tool) == (["gpu"], ["GPU-0"], ["GPU-9"], False)
    assert (side.claims, side.expected, side.seen, side.no_tool) == ([], [], [], True)
    assert facts.nodes[0].extended_gpus == 4 and facts.cluster_policy_device_plugin
    assert facts.quotas[0].counted == {"count/resourceclaims.resource.k8s.io": 2,
                                       f"{DRIVER}.deviceclass.resource.k8s.io/devices": 4}
    assert classify(facts)[0] == "cdi-wrong-device"
    facts.containers = []
    assert classify(facts)[0] == "quota-not-enforced"
    facts.quotas = []
    assert classify(facts)[0] == "policy-conflict"
    snap.cluster_policies[0]["spec"]["devicePlugin"]["enabled"] = False
    assert not build_facts(snap, builtin("nvidia")).cluster_policy_device_plugin


def test_a_pod_bound_with_its_claim_unallocated_is_a_scheduler_without_dra():
    pod, claim = pending(message=None)
    bound = changed(pod, node="cpu-0", scheduler_name="default-scheduler")
    code, reason = classify(with_workload(healthy(), bound, claim))
    assert code == "scheduler-without-dra"
    assert "bound to cpu-0 by default-scheduler with claim(s) gpu-pod-gpu-x unallocated" in reason
    never_generated = changed(bound, claims={}, ungenerated_claims=["gpu"])
    assert classify(with_workload(healthy(), never_generated, claim))[0] \
        == "scheduler-without-dra"


def test_a_bound_pod_whose_claim_is_allocated_is_not_a_scheduler_without_dra():
    pod, claim = bound_not_running()
    assert classify(with_workload(healthy(), pod, claim))[0] != "scheduler-without-dra"


def test_scheduler_without_dra_beats_the_missing_class_its_claim_names():
    pod, claim = pending(message=None, device_class="no-such-class")
    bound = changed(pod, node="cpu-0")
    assert classify(with_workload(healthy(), bound, claim))[0] == "scheduler-without-dra"


def test_a_tainted_device_given_to_a_claim_without_toleration_is_device_tainted():
    facts = build_facts(_tainted_snapshot(UNTOLERATED_CLAIM), builtin("nvidia"))
    assert facts.untolerated_taints == {"ns/gpu-untolerated": ["gpu: gpu-h100-0/gpu-4 (gpu.nvidia.com/xid=79:NoSchedule)"]}
    code, reason = classify(facts)
    assert code == "device-tainted"
    assert "ns/gpu-untolerated" in reason and "gpu.nvidia.com/xid=79:NoSchedule" in reason


def test_a_tolerated_taint_is_not_device_tainted():
    import copy
    claim = copy.deepcopy(UNTOLERATED_CLAIM)
    claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}]
    facts = build_facts(_tainted_snapshot(claim), builtin("nvidia"))
    assert facts.untolerated_taints == {}
    assert classify(facts)[0] != "device-tainted"
    # An informational taint (effect None) keeps nobody off the device.
    informational = copy.deepcopy(_tainted_snapshot(UNTOLERATED_CLAIM))
    informational.slices[0]["spec"]["devices"][1]["taints"][0]["effect"] = "None"
    assert build_facts(informational, builtin("nvidia")).untolerated_taints == {}


def test_a_device_a_rule_taints_given_to_a_claim_without_toleration_is_device_tainted():
    facts = build_facts(_ruled("NoSchedule"), builtin("nvidia"))
    assert facts.untolerated_taints == {
        "ns/gpu-untolerated": ["gpu: gpu-h100-0/gpu-3 (example.com/gpu-maintenance=planned:NoSchedule)"]}
    assert facts.not_evicted == {}  # NoSchedule evicts nobody
    code, reason = classify(facts)
    assert code == "device-tainted"
    assert "DeviceTaintRule ns-rule" in reason and "DRADeviceTaintRules" in reason and "kube-scheduler" in reason


def test_a_pod_left_running_on_a_device_a_rule_taints_noexecute_is_not_evicted():
    facts = build_facts(_ruled("NoExecute"), builtin("nvidia"))
    assert list(facts.not_evicted) == ["ns/gpu-untolerated"]
    code, reason = classify(facts)
    assert code == "device-tainted" and "device-taint-eviction-controller" in reason
    # Once the pod is being deleted (evicted), nothing is left to evict.
    snap = _ruled("NoExecute")
    snap.pods[0]["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    assert build_facts(snap, builtin("nvidia")).not_evicted == {}


def test_rules_of_other_devices_taint_nothing_here():
    snap = _ruled("NoSchedule")
    snap.taint_rules[0]["spec"]["deviceSelector"]["device"] = "gpu-7"
    assert build_facts(snap, builtin("nvidia")).untolerated_taints == {}


def test_one_device_in_two_claims_is_allocation_invalid():
    claims = [_claim_on("first", "gpu-1", "p1"), _claim_on("second", "gpu-1", "p2")]
    snap = Snapshot(namespace="ns", pods=[_consumer("a", "p1", "first"), _consumer("b", "p2", "second")],
                    claims=claims, all_claims=claims, slices=[A100_SLICE], device_classes=[GPU_CLASS],
                    control_plane={"kube-scheduler": "x"})
    code, reason = classify(build_facts(snap, builtin("nvidia")))
    assert code == "allocation-invalid"
    assert "device gpu.nvidia.com/gpu-a100-0/gpu-1 is allocated to both first and second" in reason


def test_a_gpu_and_a_mig_device_of_it_in_two_claims_is_partition_overlap():
    """Recorded from the mig-counters-ignored bed: the full GPU to one claim, a MIG device
    carved from it to another (MIG devices published without consumesCounters)."""
    mig_claim = _claim_on("mig", "gpu-0-mig-1g10gb-19-0", "p2")
    mig_claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "mig.nvidia.com"
    claims = [_claim_on("whole", "gpu-0", "p1"), mig_claim]
    snap = Snapshot(namespace="ns", pods=[_consumer("a", "p1", "whole"), _consumer("b", "p2", "mig")],
                    claims=claims, all_claims=claims, slices=[H100_MIG_SLICE],
                    device_classes=[GPU_CLASS, MIG_CLASS], control_plane={"kube-scheduler": "x"})
    code, reason = classify(build_facts(snap, builtin("nvidia")))
    assert code == "partition-overlap"
    assert "gpu-0-mig-1g10gb-19-0 (a partition of GPU GPU-0) is allocated to mig while whole" in reason


def test_right_allocations_are_not_allocation_invalid():
    claims = [_claim_on("first", "gpu-0", "p1"), _claim_on("second", "gpu-1", "p2")]
    snap = Snapshot(namespace="ns", pods=[_consumer("a", "p1", "first"), _consumer("b", "p2", "second")],
                    claims=claims, all_claims=claims, slices=[A100_SLICE], device_classes=[GPU_CLASS],
                    control_plane={"kube-scheduler": "x"})
    facts = build_facts(snap, builtin("nvidia"))
    assert facts.allocation_problems == []
    assert classify(facts)[0] != "allocation-invalid"


def test_a_mig_device_listed_under_the_gpu_whose_counters_it_consumes_is_inventory_mismatch():
    """The slice says gpu-1-mig-2g20gb-14-2 is carved from gpu-1 (it consumes gpu-1's counter
    set) and its container lists it under GPU-1, yet its parentUUID says GPU-0."""
    snap = _mig_same_parent_bed({"ctr0": "GPU-0", "ctr1": "GPU-0", "ctr2": "GPU-1", "ctr3": "GPU-1"})
    facts = build_facts(snap, builtin("nvidia"))
    assert facts.allocation_problems == []  # by the published attributes, nothing is wrong
    code, reason = classify(facts)
    assert code == "inventory-mismatch", reason
    assert ("mig-same-parent/ctr2 was allocated MIG device gpu-h100-0/gpu-1-mig-2g20gb-14-2 (2g.20gb), "
            "published with parentUUID GPU-0, but its nvidia-smi -L lists it under GPU-1, which is gpu-1, "
            "the GPU whose counter set (gpu-1-counter-set)") in reason


def test_a_mig_device_listed_under_a_gpu_sharing_no_counters_with_it_is_not_inventory_mismatch():
    """A GPU the device has no counters of (CDI handed the container another one), or the
    published parent itself: the inventory is not what the containers contradict."""
    for listed in ({"ctr0": "GPU-0", "ctr2": "GPU-7"}, {"ctr0": "GPU-0", "ctr2": "GPU-0", "ctr3": "GPU-0"}):
        facts = build_facts(_mig_same_parent_bed(listed), builtin("nvidia"))
        assert classify(facts)[0] != "inventory-mismatch"
    # MIG devices published without consumesCounters (mig-counters-ignored) say nothing of their GPU.
    snap = _mig_same_parent_bed({"ctr2": "GPU-1"})
    for d in snap.slices[0]["spec"]["devices"]:
        d.pop("consumesCounters")
    assert classify(build_facts(snap, builtin("nvidia")))[0] != "inventory-mismatch"


def test_a_mig_container_listing_its_published_parent_is_not_a_cdi_fault():
    """A MIG device's container lists the GPU its parentUUID names: what injection should give
    (a MIG device has no uuid of its own in the slice, so the parent is the expected identity)."""
    snap = _mig_same_parent_bed({"ctr0": "GPU-0", "ctr1": "GPU-0"})
    facts = build_facts(snap, builtin("nvidia"))
    assert [c.expected for c in facts.containers] == [["GPU-0"], ["GPU-0"]]
    assert classify(facts)[0] not in ("cdi-wrong-device", "cdi-not-injected")
    # Under a GPU it has nothing to do with (no shared counters either): CDI handed it another GPU.
    snap = _mig_same_parent_bed({"ctr0": "GPU-7"})
    assert classify(build_facts(snap, builtin("nvidia")))[0] == "cdi-wrong-device"


def test_a_diagnosis_that_crashes_is_diagnosis_error_and_never_rerun(monkeypatch):
    """Not ``timeout``: --reruns retries that, and a crash in our own rules would end FLAKY."""
    import draconf.diagnosis as diagnosis
    from draconf.profile import resolve
    from draconf.pytest_plugin import RERUN_CODES

    def crash(*_):
        raise KeyError("a rule read a fact that is not there")
    monkeypatch.setattr(diagnosis, "classify", crash)
    monkeypatch.setattr(diagnosis, "gather", lambda *_: None)
    monkeypatch.setattr(diagnosis, "build_facts", lambda *_: None)
    result = diagnosis.diagnose(None, resolve("nvidia"), "ns", "sees no GPU")
    assert result.code == "diagnosis-error" and "diagnosis itself failed" in result.reason
    assert result.code not in RERUN_CODES


def test_a_code_the_check_named_itself_keeps_the_checks_own_words(pytester, monkeypatch):
    """``spec-altered`` raised by the check as data, while the rules found something else (a pod
    left Running): the recorded reason is the check's sentence, not the other rule's."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(HOOK_CONFTEST.replace(
        '"cdi-wrong-device", "container sees GPU-b, allocated GPU-a", {"state": "pod running"}',
        '"timeout", "No definitive signal from the cluster; last observed: pod p Running", {}'))
    pytester.makepyfile(test_stripped="""
import pytest

@pytest.mark.draconf(workload="single-gpu", check="allocation")
def test_allocation():
    from draconf.errors import CheckFailed
    raise CheckFailed("no pod of the workload asks for a device (p); mutating admission acting on pod "
                      "creates: MutatingAdmissionPolicy 'strip'", code="spec-altered")
""")
    pytester.runpytest("-p", "no:cacheprovider", "--draconf-reports=reports")
    import json
    (row,) = json.loads((pytester.path / "reports" / "summary.json").read_text())["tests"]
    assert row["diagnosis"] == "spec-altered", row
    assert row["reason"].startswith("no pod of the workload asks for a device") and "'strip'" in row["reason"], row


def test_a_server_still_too_busy_after_the_retries_is_api_throttled_not_timeout():
    from kubernetes.client.exceptions import ApiException

    from draconf.waits import WaitTimeout
    facts = healthy()
    facts.failure = Failure.of(ApiException(status=429, reason="Too Many Requests"))
    code, reason = classify(facts)
    assert code == "api-throttled" and "429 Too Many Requests" in reason
    try:  # a wait that gave up while the server answered 503: the answer is in its context
        try:
            raise ApiException(status=503, reason="Service Unavailable")
        except ApiException:
            raise WaitTimeout("timed out after 30s waiting for pod p") from None
    except WaitTimeout as err:
        facts.failure = Failure.of(err)
    assert classify(facts)[0] == "api-throttled"
    # The suite's own words are not the server's answer.
    facts.failure = Failure.of(AssertionError("the API server answered 429 Too Many Requests"))
    assert classify(facts)[0] != "api-throttled"


BROKEN_DIAGNOSIS_CONFTEST = """
import pytest
from draconf import diagnosis
from draconf.reporting import ReportingPlugin, pytest_addoption  # noqa: F401

def _gather(api, profile, namespace):
    raise ValueError("gather broke")

def _diagnose_item(item, exc):
    if "recording" in item.name:
        raise KeyError("hook broke")
    return diagnosis.diagnose(object(), None, "ns-x", exc)

def pytest_configure(config):
    config.pluginmanager.register(ReportingPlugin(config), "draconf-reporting")
    diagnosis.gather, diagnosis.diagnose_item = _gather, _diagnose_item

@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except BaseException as exc:
        diagnosis.record_failure_diagnosis(item, exc)
        raise
"""


def test_a_crashing_diagnosis_keeps_its_traceback_for_the_debug_log(pytester, monkeypatch):
    """log.exception put the diagnosis's own traceback in the live log (INFO and above): with
    draconf run's log options the terminal gets one warning line, debug.log the traceback."""
    from draconf.cli import log_options
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(BROKEN_DIAGNOSIS_CONFTEST)
    pytester.makepyfile(test_crash="def test_diagnosing():\n    assert False, 'x'\n\n"
                                   "def test_recording():\n    assert False, 'y'\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--draconf-reports=out",
                                           *log_options(pytester.path / "out"))
    result.assert_outcomes(failed=2)
    terminal = result.stdout.str()
    assert "the diagnosis of ns-x failed (ValueError: gather broke); the debug log has its traceback" in terminal
    assert ("could not diagnose test_crash.py::test_recording (KeyError: 'hook broke'); the debug log has "
            "the traceback") in terminal
    assert "Traceback" not in terminal and 'raise ValueError("gather broke")' not in terminal
    debug = (pytester.path / "out" / "debug.log").read_text()
    assert "diagnosis of ns-x failed\nTraceback (most recent call last)" in debug
    assert "could not diagnose test_crash.py::test_recording\nTraceback (most recent call last)" in debug
    assert 'raise ValueError("gather broke")' in debug and "raise KeyError(\"hook broke\")" in debug
