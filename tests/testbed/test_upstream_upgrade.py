"""A real upgrade of NVIDIA's driver on the bed, gated as a platform team would gate it: a bed
running NVIDIA's last release under its old name (``--driver nvidia-v25.12.0``), a baseline of
the suite on it, a workload left running, ``draconf testbed upgrade --driver nvidia-v0.4.0``
(the renamed module and chart, upgraded in place as the release's docs/upgrade.md says), the
suite again with ``--compare``: it must pass, report exactly the plugin's new image as what
changed, and the workload from before must still hold its GPU and be deletable.  The way back
is refused, as that guide says it must be, and changes nothing.

Needs the archives (../shared/upstream, or $DRACONF_UPSTREAM_SOURCES); builds are cached by
archive hash."""

from __future__ import annotations

import json

import pytest

from draconf import manifests, namespaces, waits
from draconf.claims import Claim
from draconf.kube import connect
from draconf.pods import Pod
from draconf.errors import EXIT_BAD_INPUT
from draconf.testbed.upstream_nvidia import RELEASES, WORKLOAD_GLIBC_REF, sources_dir

from .conftest import _start, _stop
from .test_allocation_branches import claim_doc, pod_doc
from .test_cli import draconf

OLD, NEW = "nvidia-v25.12.0", "nvidia-v0.4.0"
#: The release keeps its name, namespace and object names across the chart's rename.
NAMESPACE = DAEMONSET = "nvidia-dra-driver-gpu"
#: What the gate runs before and after: preflight and the walkthrough's workloads.
SELECTION = "test_preflight or TestWorkload"


@pytest.fixture(scope="module")
def old_release_bed():
    missing = [r.archive for r in RELEASES.values() if not (sources_dir() / r.archive).is_file()]
    if missing:
        pytest.skip(f"NVIDIA's release archives {missing} are not in {sources_dir()} (set $DRACONF_UPSTREAM_SOURCES)")
    bed = _start("upstream-upgrade", [], driver=OLD)
    yield bed
    _stop(bed)


def plugin_images(api) -> list[str]:
    ds = api.apps.read_namespaced_daemon_set(f"{DAEMONSET}-kubelet-plugin", NAMESPACE)
    return [c.image for c in ds.spec.template.spec.containers]


def test_the_upgrade_to_the_renamed_release_is_gated_and_keeps_running_workloads(old_release_bed, tmp_path):
    bed, api = old_release_bed, connect(old_release_bed.kubeconfig)
    baseline = tmp_path / "before.json"
    before = draconf("run", "--testbed-name", bed.name, "--save-baseline", str(baseline),
                     "--reports", str(tmp_path / "before"), "-k", SELECTION, timeout=900)
    assert before.returncode == 0, (before.stdout + before.stderr)[-4000:]
    assert plugin_images(api) == ["draconf.local/k8s-dra-driver-gpu:v25.12.0"]

    # A tenant's workload from before the upgrade: it must keep its GPU through it.
    ns = namespaces.create(api, namespaces.RunId("selftest"), "before-upgrade")
    try:
        tenant = pod_doc("tenant", "held")
        tenant["spec"]["containers"][0]["image"] = WORKLOAD_GLIBC_REF  # what the bed's nodes hold
        manifests.create(api, ns, [claim_doc("held"), tenant])
        waits.wait_until("the tenant's pod to run", lambda: Pod.read(api, ns, "tenant"), lambda p: p.is_running,
                         timeout=120, describe=lambda p: p.summary())

        upgraded = draconf("testbed", "upgrade", "--name", bed.name, "--driver", NEW, timeout=600)
        out = upgraded.stdout + upgraded.stderr
        assert upgraded.returncode == 0, out[-3000:]
        assert "nameOverride=nvidia-dra-driver-gpu" in out and "0 created, 0 deleted" in out, out
        assert plugin_images(api) == ["draconf.local/dra-driver-nvidia-gpu:v0.4.0"]
        assert bed.state()["driver"] == NEW

        claim = Claim.read(api, ns, "held")
        assert Pod.read(api, ns, "tenant").is_running and claim.is_allocated and claim.reserved_for_uids, claim.summary()
        # ... and, the upgrade guide's first check, still deletable: the new plugin unprepares
        # what the old one prepared, so its GPU is released.
        namespaces.delete_releasing_devices(api, ns, timeout=90)
    finally:
        namespaces.delete(api, ns, wait=90)

    # What the upgrade changed is judged here; how long a verdict took on the shared 2-core
    # machine is not (a preflight row went 1.8 s -> 4.2 s in a CI run): no "slower" change.
    after = draconf("run", "--testbed-name", bed.name, "--compare", str(baseline), "--slower-factor", "1000",
                    "--reports", str(tmp_path / "after"), "-k", SELECTION, timeout=900)
    out = after.stdout + after.stderr
    assert after.returncode == 0, out[-4000:]
    assert "0 regression(s), 1 other change(s)" in out, out[-3000:]
    assert (f"change daemonset {NAMESPACE}/{DAEMONSET}-kubelet-plugin: images "
            "['draconf.local/k8s-dra-driver-gpu:v25.12.0'] -> ['draconf.local/dra-driver-nvidia-gpu:v0.4.0']") in out
    rows = json.loads((tmp_path / "after" / "summary.json").read_text())["tests"]
    walkthrough = [r for r in rows if r["workload"] in ("single-gpu", "model-selected", "memory-selected",
                                                         "two-gpu", "shared-claim", "deployment")]
    assert len(walkthrough) == 18 and all(r["outcome"] == "passed" for r in walkthrough), walkthrough

    # The way back: refused with the release's reason, and nothing touched.
    back = draconf("testbed", "upgrade", "--name", bed.name, "--driver", OLD, timeout=120)
    out = back.stdout + back.stderr
    assert back.returncode == EXIT_BAD_INPUT and "cannot be taken back" in out and "BootID" in out, out
    assert "Traceback" not in out
    assert plugin_images(api) == ["draconf.local/dra-driver-nvidia-gpu:v0.4.0"] and bed.state()["driver"] == NEW


def test_an_upgrade_without_the_name_override_is_named_as_a_rename_and_judged_on_its_merits(tmp_path):
    """The mistake v0.4.0's upgrade guide warns of: the renamed chart upgraded without
    ``nameOverride``, so its objects come under the chart's new name and the old ones are
    deleted (as ``helm upgrade`` deletes what the new revision no longer renders).  On this bed
    the driver then works (the new plugin pods register and publish once the old ones are gone),
    so the suite must pass; what the gate must say is that the plugin DaemonSet was renamed, for
    whatever refers to it by name."""
    missing = [r.archive for r in RELEASES.values() if not (sources_dir() / r.archive).is_file()]
    if missing:
        pytest.skip(f"NVIDIA's release archives {missing} are not in {sources_dir()} (set $DRACONF_UPSTREAM_SOURCES)")
    bed = _start("upstream-rename", [], driver=OLD)
    try:
        api = connect(bed.kubeconfig)
        baseline = tmp_path / "before.json"
        # The gate's record of the plugin needs no workload: preflight reads it.
        before = draconf("run", "--testbed-name", bed.name, "--save-baseline", str(baseline),
                         "--reports", str(tmp_path / "before"), "-k", "test_preflight", timeout=600)
        assert before.returncode == 0, (before.stdout + before.stderr)[-4000:]

        upgraded = draconf("testbed", "upgrade", "--name", bed.name, "--driver", NEW, "--without-name-override",
                           timeout=600)
        out = upgraded.stdout + upgraded.stderr
        assert upgraded.returncode == 0, out[-3000:]
        assert "without nameOverride: its objects are named dra-driver-nvidia-gpu-*" in out, out
        names = {ds.metadata.name for ds in api.apps.list_namespaced_daemon_set(NAMESPACE).items}
        assert names == {"dra-driver-nvidia-gpu-kubelet-plugin"}, names

        # The rename is judged, not the machine's speed (as in the test above).
        after = draconf("run", "--testbed-name", bed.name, "--compare", str(baseline), "--slower-factor", "1000",
                        "--reports", str(tmp_path / "after"), "-k", "test_preflight or single-gpu", timeout=900)
        out = after.stdout + after.stderr
        assert after.returncode == 0, out[-4000:]
        assert "0 regression(s), 1 other change(s)" in out, out[-3000:]
        assert (f"change daemonset {NAMESPACE}/{DAEMONSET}-kubelet-plugin: renamed to "
                "dra-driver-nvidia-gpu-kubelet-plugin (images ['draconf.local/k8s-dra-driver-gpu:v25.12.0'] -> "
                "['draconf.local/dra-driver-nvidia-gpu:v0.4.0'])") in out, out[-3000:]
    finally:
        _stop(bed)
