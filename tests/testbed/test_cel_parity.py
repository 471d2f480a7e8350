"""draconf.cel against the real scheduler, device by device, on a bed of KWOK GPU nodes.

For every CEL selector in manifests/ and for NVIDIA-style ones (model by lowerAscii().matches,
memory by quantity, versions by semver, a missing attribute, a short-circuit over one), and for
every published device: a claim whose selectors are [pin to that device's uuid, the selector]
and a pod using it.  The class's and the pin's selectors stop the allocator on every other
device, so the scheduler's answer is the selector's verdict on that device alone:
bound (match), ``cannot allocate all claims`` (no match) or ``CEL runtime error: ...`` (error).
draconf.cel's prediction over the published ResourceSlices must be the same, error text included.
"""

from __future__ import annotations

import os
import time

import pytest
from kubernetes.client.exceptions import ApiException

from draconf import cel, lint, manifests, namespaces
from draconf.errors import EXIT_BAD_INPUT, EXIT_TARGET_UNUSABLE
from draconf.devices import PublishedDevices
from draconf.kube import connect
from draconf.profile import builtin, for_target
from draconf.testbed import inventory
from draconf.testbed.cluster import Testbed

PROFILE = for_target(builtin("nvidia"), "testbed")
RUN = namespaces.RunId("selftest")
D = "device.attributes['gpu.nvidia.com']"

NVIDIA_STYLE = [
    f"{D}.productName.lowerAscii().matches('^.*h200.*$')",
    "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity(\"80Gi\"))",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity(\"81559Mi\")) == 0",
    f"{D}.cudaComputeCapability.isGreaterThan(semver('8.5.0'))",
    f"{D}.driverVersion.isLessThan(semver('1000.0.0')) && {D}.driverVersion.major() >= 580",
    f"{D}.serialNumber == 'x'",                                      # missing attribute
    "device.capacity['gpu.nvidia.com'].cores.isGreaterThan(quantity('1'))",  # missing capacity
    f"{D}.architecture == 'Hopper' || {D}.serialNumber == 'x'",       # error only where not Hopper
    f"{D}.productName > 5",                                          # a type error
]


def manifest_selectors() -> list[str]:
    found = []
    for path in sorted(manifests.MANIFEST_DIR.glob("*.yaml")):
        found += [f.expression for f in lint.load_files([str(path)]) if f.expression]
    return list(dict.fromkeys(found))


@pytest.fixture(scope="module")
def kwok_api():
    bed = Testbed.named("cel-parity")
    if not bed.is_up:
        bed.up(inventory.with_node_kind(inventory.load(inventory.GUIDE_INVENTORY), "kwok"), faults=[], log=lambda *_: None)
    yield connect(bed.kubeconfig)
    if os.environ.get("DRACONF_KEEP_BEDS") != "1":
        bed.down(log=lambda *_: None)


def _claim(name: str, uuid: str, expression: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": PROFILE.device_class,
                "selectors": [{"cel": {"expression": f"{D}.uuid == '{uuid}'"}},
                              {"cel": {"expression": expression}}]}}]}}}


def _pod(name: str, claim: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "tolerations": [dict(t) for t in PROFILE.tolerations],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        "containers": [{"name": "c", "image": PROFILE.image, "command": ["sleep", "1d"],
                        "resources": {"claims": [{"name": "gpu"}]}}]}}


def _scheduler_verdict(pod) -> tuple[str, str] | None:
    if pod.spec.node_name:
        return "match", ""
    for c in pod.status.conditions or []:
        if c.type == "PodScheduled" and c.status == "False" and c.message:
            if "CEL runtime error" in c.message:
                return "error", c.message
            if "cannot allocate all claims" in c.message:
                return "no match", c.message
    return None


def _round(api, ns: str, expression: str, devices) -> dict[str, tuple[str, str]]:
    """The scheduler's verdict of ``expression`` on each device (pods pinned one per device)."""
    names = {}
    for i, d in enumerate(devices):
        name = f"d{i}"
        api.resource.create_namespaced_resource_claim(ns, _claim(name, d.attribute("uuid"), expression))
        api.core.create_namespaced_pod(ns, _pod(name, name))
        names[name] = d
    seen: dict[str, tuple[str, str]] = {}
    deadline = time.monotonic() + 60
    while len(seen) < len(names) and time.monotonic() < deadline:
        for pod in api.core.list_namespaced_pod(ns).items:
            if pod.metadata.name not in seen and (v := _scheduler_verdict(pod)):
                seen[pod.metadata.name] = v
        time.sleep(0.3)
    api.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    deadline = time.monotonic() + 60
    while api.core.list_namespaced_pod(ns).items and time.monotonic() < deadline:
        time.sleep(0.3)
    api.resource.delete_collection_namespaced_resource_claim(ns)
    while api.resource.list_namespaced_resource_claim(ns).items and time.monotonic() < deadline:
        time.sleep(0.3)
    assert len(seen) == len(names), f"no scheduler verdict for {sorted(set(names) - set(seen))}"
    return {names[n].key: v for n, v in seen.items()}


def test_cel_verdicts_agree_with_the_scheduler_on_every_device(kwok_api):
    api = kwok_api
    devices = sorted(PublishedDevices.read(api, PROFILE.driver), key=lambda d: d.key)
    assert len(devices) >= 8 and all(d.attribute("uuid") for d in devices)
    selectors = manifest_selectors() + NVIDIA_STYLE
    assert len(manifest_selectors()) >= 5  # 02, 03, 04, 31, 32
    ns = namespaces.create(api, RUN, "cel-parity")
    table, disagreements, outcomes = [], [], set()
    try:
        for expression in selectors:
            scheduler = _round(api, ns, expression, devices)
            for d in devices:
                predicted = cel.evaluate(expression, d)
                actual, message = scheduler[d.key]
                outcomes.add(actual)
                table.append((expression, d.key, predicted.outcome, actual))
                same = predicted.outcome == actual
                if same and actual == "error":
                    # the scheduler's text ends with the engine's error, e.g. "no such key: serialNumber"
                    key = predicted.error.split("no such key: ")[-1] if predicted.missing else None
                    same = (f"no such key: {key}" in message) if key else "no such overload" in message \
                        or "no matching overload" in message
                if not same:
                    disagreements.append(f"{d.key}: draconf.cel {predicted}, scheduler {actual} {message}")
    finally:
        try:
            namespaces.delete(api, ns, wait=60)
        except ApiException:
            pass
    print(f"\nparity: {len(selectors)} selectors x {len(devices)} devices = {len(table)} verdicts, "
          f"{len(disagreements)} disagreements; outcomes seen: {sorted(outcomes)}")
    assert not disagreements, "\n".join(disagreements)
    assert outcomes == {"match", "no match", "error"}  # each kind of verdict was compared


LINTED = f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: h100}}
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly:
            deviceClassName: gpu.nvidia.com
            selectors:
              - cel: {{expression: "{D}.productName.lowerAscii().matches('^.*h100.*$')"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: broken}}
spec:
  devices:
    requests:
      - name: serial
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors: [{{cel: {{expression: "{D}.serialNumber == 'x'"}}}}]
      - name: syntax
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors: [{{cel: {{expression: "device.driver =="}}}}]
      - name: nowhere
        exactly: {{deviceClassName: no-such-class}}
"""


def test_lint_reports_matches_and_the_schedulers_errors_from_the_bed(kwok_api, tmp_path):
    import subprocess
    import sys
    good, mixed = tmp_path / "good.yaml", tmp_path / "mixed.yaml"
    good.write_text(LINTED.split("---")[0])
    mixed.write_text(LINTED)
    env = {**os.environ, "DRACONF_STATE_DIR": os.environ.get("DRACONF_STATE_DIR", "")}

    def lint_cli(*args):
        return subprocess.run([sys.executable, "-m", "draconf.cli", "lint", *args], capture_output=True,
                              text=True, env={k: v for k, v in env.items() if v}, timeout=120)

    h100 = [str(d) for d in PublishedDevices.read(kwok_api, PROFILE.driver)
            if "H100" in d.attribute("productName")]
    out = lint_cli("--name", "cel-parity", str(good))
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if "ResourceClaimTemplate h100" in line)
    assert f"matches {len(h100)} of 8:" in row and h100 and all(d in row for d in h100)
    out = lint_cli("--name", "cel-parity", str(mixed))
    assert out.returncode == 1, out.stderr
    assert "request serial, selector #0" in out.stdout
    assert "CEL runtime error: no such key: serialNumber on 8" in out.stdout
    assert "CEL compile error: syntax error" in out.stdout
    assert "device class no-such-class does not exist" in out.stdout
    # bad input: one line on stderr, exit 11, nothing printed as a verdict
    missing = lint_cli("--name", "cel-parity", str(tmp_path / "absent.yaml"))
    assert missing.returncode == EXIT_BAD_INPUT and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    (tmp_path / "bad.yaml").write_text("kind: [unclosed\n")
    bad = lint_cli("--name", "cel-parity", str(tmp_path / "bad.yaml"))
    assert bad.returncode == EXIT_BAD_INPUT and "is not valid YAML" in bad.stderr
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
""")
    env["KUBECONFIG"] = str(kubeconfig)
    down = lint_cli("--target", "kubeconfig", str(good))
    # An unusable target, as for every command: one line, exit 12.
    assert down.returncode == EXIT_TARGET_UNUSABLE and "cannot reach the API server at https://127.0.0.1:1" in down.stderr
    assert "Traceback" not in down.stderr and len(down.stderr.strip().splitlines()) == 1
