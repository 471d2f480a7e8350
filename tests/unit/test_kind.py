"""``draconf run --target kind``: what can be exercised without Docker or a kind node image.

The kind config, the tool checks (this machine has a docker client whose daemon does not
answer, and no kind), the command lines pytest-kind-ng's own KindCluster gives ``kind``
(recorded by a stand-in ``kind`` script: no cluster is made), and the chart rendered for kind by
the real helm.  Creating the cluster, pulling images and the run on it are not exercised here
(docs/real-cluster.md, "On a kind cluster").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from draconf.errors import EXIT_BAD_INPUT, EXIT_TARGET_UNUSABLE, DraconfError, TargetUnusable
from draconf.testbed import example_driver, kind

REPO = Path(__file__).resolve().parents[2]


def test_the_cluster_config_turns_dra_and_cdi_on():
    config = kind.cluster_config(workers=2)
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4" and config["kind"] == "Cluster"
    assert config["featureGates"] == {"DynamicResourceAllocation": True}
    (patch,) = config["containerdConfigPatches"]
    # containerd 2's config (kind node images from v1.34): the CRI runtime plugin's CDI switch.
    assert tomllib.loads(patch) == {"plugins": {"io.containerd.cri.v1.runtime": {"enable_cdi": True}}}
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker"]
    assert yaml.safe_load(yaml.safe_dump(config)) == config


def test_a_cluster_without_workers_is_refused():
    with pytest.raises(DraconfError, match="at least one worker"):
        kind.cluster_config(workers=0)


def test_missing_tools_are_one_line_and_target_unusable():
    with pytest.raises(TargetUnusable) as err:
        kind.check_tools(which=lambda tool: None)
    assert err.value.exit_code == EXIT_TARGET_UNUSABLE
    assert "needs kind and docker on PATH" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(TargetUnusable, match="needs kind on PATH, and this machine has no kind"):
        kind.check_tools(which=lambda tool: "/usr/bin/docker" if tool == "docker" else None)


def test_a_machine_without_go_is_told_before_any_cluster_is_made():
    """The chart and helm come from Go modules: found missing after `kind create cluster`, it
    left a cluster behind and a traceback; now one line, and docker is not even asked."""
    asked = []
    which = lambda tool: None if tool == "go" else f"/usr/bin/{tool}"  # noqa: E731
    with pytest.raises(TargetUnusable, match=r"no `go` on PATH: install Go 1.26 or later") as err:
        kind.check_tools(which=which, run=lambda *a, **k: asked.append(a))
    assert err.value.exit_code == EXIT_TARGET_UNUSABLE and "\n" not in str(err.value) and not asked


def test_helm_for_a_kind_cluster_does_not_build_the_embedded_bed(tmp_path, monkeypatch):
    from draconf.testbed import build, pins
    monkeypatch.setattr(pins, "bin_dir", lambda: tmp_path / "bin")
    monkeypatch.setattr(build, "ensure_built", lambda **kw: pytest.fail("the whole bed was built for helm"))
    built = []

    def go_build(moddir, targets, outdir, log, **kw):
        built.extend(t.module for t in targets)
        (outdir / "helm").write_text("helm")
    monkeypatch.setattr(build, "_go_build", go_build)
    helm = build.ensure_helm_built(log=lambda m: None)
    assert helm.read_text() == "helm" and built == ["helm"]
    assert build.ensure_helm_built(log=lambda m: None) == helm and built == ["helm"]  # once


@pytest.mark.skipif(not shutil.which("docker"), reason="needs a docker client (without its daemon)")
def test_a_docker_daemon_that_does_not_answer_is_target_unusable(tmp_path):
    """The real docker client against no daemon (this machine has the client only)."""
    if subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        pytest.skip("a Docker daemon answers here")
    fake_kind = tmp_path / "kind"
    fake_kind.write_text("#!/bin/sh\nexit 0\n")
    fake_kind.chmod(0o755)
    which = lambda tool: str(fake_kind) if tool == "kind" else shutil.which(tool)  # noqa: E731
    with pytest.raises(TargetUnusable, match=r"Docker does not answer \(.*\)") as err:
        kind.check_tools(which=which)
    assert "\n" not in str(err.value)


def test_draconf_run_target_kind_without_kind_is_one_line_and_target_unusable(tmp_path):
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "DRACONF_STATE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "draconf.cli", "run", "--target", "kind"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_TARGET_UNUSABLE, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("draconf: error: --target kind needs kind and docker on PATH")
    assert not (tmp_path / "kind").exists()  # nothing made


def test_kind_options_without_target_kind_are_bad_input():
    proc = subprocess.run([sys.executable, "-m", "draconf.cli", "run", "--keep-cluster"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_BAD_INPUT and "go with --target kind" in proc.stderr


KIND_STANDIN = """#!/bin/sh
# Records its arguments; `get clusters` prints $EXISTING; `create` writes a kubeconfig.
echo "$*" >> "{log}"
case "$1 $2" in
  "get clusters") [ -n "$EXISTING" ] && echo "$EXISTING"; exit 0;;
  "get kubeconfig") echo "$KUBECONFIG_DOC"; exit 0;;
  "create cluster")
    for a in "$@"; do case "$a" in --kubeconfig=*) echo "$KUBECONFIG_DOC" > "${{a#--kubeconfig=}}"; esac; done;;
esac
exit 0
"""
KUBECONFIG_DOC = """apiVersion: v1
kind: Config
clusters: [{name: kind, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: kind, user: {token: t}}]
contexts: [{name: kind, context: {cluster: kind, user: kind}}]
current-context: kind
"""


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """A ``kind`` that records how pytest-kind-ng's KindCluster calls it, and a docker that
    answers ``info``; returns (which, log file)."""
    pytest.importorskip("pytest_kind", reason="pytest-kind-ng is the [kind] extra")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "kind.log"
    (bindir / "kind").write_text(KIND_STANDIN.format(log=log))
    (bindir / "docker").write_text("#!/bin/sh\necho 28.2.2\n")
    for tool in ("kind", "docker"):
        (bindir / tool).chmod(0o755)
    monkeypatch.delenv("EXISTING", raising=False)
    monkeypatch.setenv("KUBECONFIG_DOC", KUBECONFIG_DOC)

    def which(tool):
        return str(bindir / tool) if tool in ("kind", "docker") else shutil.which(tool)
    return which, log


def test_the_cluster_is_made_through_kindcluster_with_the_dra_config(standin, tmp_path):
    which, log = standin
    target = kind.KindTarget("draconf", tmp_path / "work", log=lambda m: None)
    target.create_cluster(which=which)
    calls = log.read_text().splitlines()
    # ours (is there one already?), then KindCluster.create's own
    assert calls[:2] == ["get clusters", "get clusters"], calls
    assert calls[2] == (f"create cluster --name=draconf --kubeconfig={target.kubeconfig} "
                        f"--image={kind.DEFAULT_IMAGE} --config {target.config_file}")
    assert yaml.safe_load(target.config_file.read_text()) == kind.cluster_config()
    assert not (tmp_path / ".pytest-kind").exists() and (tmp_path / "work" / ".pytest-kind").is_dir()
    target.stop()
    assert log.read_text().splitlines()[-1] == f"delete cluster --name=draconf --kubeconfig={target.kubeconfig}"


def test_an_existing_cluster_is_reused_only_when_kept(standin, tmp_path, monkeypatch):
    which, log = standin
    monkeypatch.setenv("EXISTING", "draconf")
    with pytest.raises(DraconfError, match="already exists; pass --keep-cluster") as err:
        kind.KindTarget("draconf", tmp_path / "work", log=lambda m: None).create_cluster(which=which)
    assert err.value.exit_code == EXIT_BAD_INPUT
    kept = kind.KindTarget("draconf", tmp_path / "work", keep=True, log=lambda m: None)
    kept.create_cluster(which=which)
    kept.stop()
    calls = log.read_text().splitlines()
    assert not [c for c in calls if c.startswith(("create", "delete"))], calls
    assert "get kubeconfig --name draconf" in calls
    assert yaml.safe_load(kept.kubeconfig.read_text())["current-context"] == "kind"


def test_the_chart_is_rendered_for_kind_with_its_own_image(tmp_path):
    """The real helm (built for the example bed) on the real chart, as the kind install runs it."""
    from draconf.testbed import build, pins
    helm = pins.bin_dir() / "example" / "helm"
    # helm alone may be there (beds that render another chart build only helm): the chart too.
    if not helm.is_file() or shutil.which("go") is None or not Path(build.example_chart_dir()).is_dir():
        pytest.skip("helm and the chart come with the first `draconf testbed up --driver example`")
    docs = example_driver.render(helm, build.example_chart_dir(), None, "v1.34.0",
                                 ["v1", "resource.k8s.io/v1", "admissionregistration.k8s.io/v1"])
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("DeviceClass", example_driver.DEVICE_CLASS) in kinds
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    assert ds["metadata"]["name"] == example_driver.PLUGIN_DAEMONSET
    (plugin,) = ds["spec"]["template"]["spec"]["containers"]
    assert plugin["image"] == f"registry.k8s.io/dra-example-driver/dra-example-driver:{pins.EXAMPLE_DRIVER_VERSION}"
    assert plugin.get("imagePullPolicy") != "Never"


def test_a_failing_kind_create_is_one_line_and_target_unusable(standin, tmp_path):
    which, log = standin
    kind_script = Path(which("kind"))
    kind_script.write_text(kind_script.read_text().replace('  "create cluster")\n', '  "create cluster") exit 1;;\n  "never")\n'))
    with pytest.raises(TargetUnusable, match=r"`kind create cluster` failed \(exit 1\)"):
        kind.KindTarget("draconf", tmp_path / "work", log=lambda m: None).create_cluster(which=which)
