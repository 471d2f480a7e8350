"""Driver profiles: the data files, the loader's errors, and reading what a container received."""

from __future__ import annotations

import pytest

from draconf.devices import Device
from draconf.errors import DraconfError
from draconf.profile import (Capabilities, Injection, Plugin, Profile, builtin, builtin_names,
                             from_dict, resolve)
from draconf.workload import Workload


def test_the_nvidia_file_is_the_old_default_exactly():
    assert builtin("nvidia") == Profile()
    assert builtin_names()[0] == "nvidia" and "example" in builtin_names()


def test_the_example_profile_describes_dra_example_driver():
    p = builtin("example")
    assert (p.driver, p.device_class, p.optional_device_classes) == ("gpu.example.com", "gpu.example.com", ())
    assert p.attributes == {"model": "model", "uuid": "uuid"}
    assert not p.has("architecture") and not p.has("type")
    assert p.injection == Injection(("env",), "env", variable="GPU_DEVICE_[0-9]+", identity="name")
    assert p.capabilities == Capabilities(gpu_cluster=False, cluster_policy=False, extended_resource=None,
                                          gpu_sharing=False)
    assert p.plugin.daemonsets == (("dra-example-driver", "dra-example-driver-kubeletplugin"),)
    assert p.plugin.gpu_node_labels == () and p.tolerations == ()


def test_identity_is_the_device_name_or_an_attribute():
    d = Device("gpu.example.com", "node-a", "gpu-3", "node-a",
               {"gpu.example.com/uuid": "gpu-1d2f", "gpu.example.com/model": "LATEST-GPU-MODEL"})
    assert builtin("example").identity(d) == "gpu-3"
    assert from_dict({"extends": "example", "injection": {"identity": "uuid"}}).identity(d) == "gpu-1d2f"


ENV = """PATH=/usr/bin:/bin
HOSTNAME=trainer
KUBERNETES_NODE_NAME=gpu-a100-0
DRA_RESOURCE_DRIVER_NAME=gpu.example.com
GPU_DEVICE_6=gpu-6
GPU_DEVICE_6_RESOURCE_CLAIM=0b4f9c7e-1111-2222-3333-444455556666
GPU_DEVICE_7=gpu-7
GPU_DEVICE_7_SHARING_STRATEGY=TimeSlicing
GPU_DEVICE_7_TIMESLICE_INTERVAL=Default
NOT_GPU_DEVICE_8=gpu-8
"""


def test_env_parser_takes_only_the_device_variables():
    assert builtin("example").injection.parse(ENV) == ["gpu-6", "gpu-7"]


def test_env_parser_sees_nothing_in_a_container_without_a_claim():
    assert builtin("example").injection.parse("PATH=/bin\nHOSTNAME=x\n") == []
    assert builtin("example").injection.parse("") == []


def test_env_parser_keeps_values_with_equals_signs_and_ignores_other_lines():
    inj = Injection(("env",), "env", variable="DEV_[0-9]+")
    assert inj.parse("DEV_0=a=b\nnot a variable\n=empty\nDEV_1=c\n") == ["a=b", "c"]


def test_nvidia_smi_parser_is_unchanged():
    out = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-4a1c-0)\n"
           "  MIG 1g.10gb  Device  0: (UUID: MIG-aa)\n"
           "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-4a1c-1)\n")
    assert builtin("nvidia").injection.parse(out) == ["GPU-4a1c-0", "GPU-4a1c-1"]
    assert builtin("nvidia").injection.describe() == "nvidia-smi -L"


def test_lines_parser_with_and_without_a_group():
    assert Injection(("ls", "/dev"), "lines", pattern=r"^(renderD\d+)$").parse("card0\nrenderD128\n") == ["renderD128"]
    assert Injection(("ls", "/dev"), "lines", pattern=r"renderD\d+").parse("x renderD129\n") == ["renderD129"]


def test_a_user_file_inherits_nvidia_unless_it_extends_another(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: airgapped\nimage: mirror/ubuntu:24.04\n")
    p = resolve(str(path))
    assert p.image == "mirror/ubuntu:24.04" and p.driver == "gpu.nvidia.com"
    path.write_text("extends: example\nname: example-mirror\nimage: mirror/ubuntu:24.04\n")
    p = resolve(str(path))
    assert p.driver == "gpu.example.com" and p.injection.format == "env" and p.name == "example-mirror"


def test_a_role_set_to_null_is_a_role_the_driver_lacks():
    p = from_dict({"attributes": {"architecture": None}})
    assert "architecture" not in p.attributes and p.has("model")
    assert "publishes no architecture attribute" in p.lacks("architecture")


def test_old_injection_value_still_loads():
    assert from_dict({"injection": "nvidia-smi"}).injection == Injection()


def test_plugin_and_capabilities_keys():
    p = from_dict({"plugin": {"daemonSets": ["ns/ds"], "podSelectors": ["app=x"],
                              "gpuNodeLabels": {"amd.com/gpu.present": "true"}},
                   "capabilities": {"gpuCluster": False, "extendedResource": "amd.com/gpu"}})
    assert p.plugin == Plugin((("ns", "ds"),), ("app=x",), (("amd.com/gpu.present", "true"),))
    assert p.plugin.namespaces == ("ns",)
    assert p.capabilities == Capabilities(False, True, "amd.com/gpu")


@pytest.mark.parametrize("data, message", [
    ({"attributes": {"uuid": None}}, "must name the uuid attribute"),
    ({"attributes": {"colour": "x"}}, "unknown role(s) colour"),
    ({"injection": {"format": "env"}}, "needs `variable`"),
    ({"injection": {"format": "lines"}}, "needs `pattern`"),
    ({"injection": {"format": "xml"}}, "must be one of nvidia-smi-L, env, lines"),
    ({"injection": {"command": "env"}}, "non-empty list of strings"),
    ({"injection": {"format": "env", "variable": "GPU_(["}}, "not a regular expression"),
    ({"injection": {"identity": "serial"}}, "`injection.identity` is 'serial'"),
    ({"injection": "dcgm"}, "`injection` must be a mapping"),
    ({"plugin": {"daemonSets": ["no-slash"]}}, "namespace/name"),
    ({"plugin": {"where": 1}}, "unknown key(s) where"),
    ({"capabilities": {"gpuCluster": "yes"}}, "true or false"),
    ({"capabilities": {"extendedResource": "gpu"}}, "resource name"),
    ({"extends": "amd"}, "must name a built-in profile"),
    ({"colour": 1}, "unknown key(s) colour"),
])
def test_invalid_profiles_are_one_clear_error(data, message):
    with pytest.raises(DraconfError) as err:
        from_dict(data, source="bad.yaml")
    assert message in str(err.value) and str(err.value).startswith("profile bad.yaml:")


def test_unknown_builtin_names_the_choices():
    with pytest.raises(DraconfError, match="use one of nvidia, example"):
        resolve("amd")


def test_manifests_run_the_profiles_command():
    example = builtin("example")
    docs = Workload("job", ["08-job.yaml"], 1).documents(example)
    job = next(d for d in docs if d["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["env"]
    assert job["spec"]["template"]["spec"]["tolerations"] == []
    (claim,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    assert claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.example.com"
    pod = next(d for d in Workload("w", ["01-single-gpu.yaml"], 1).documents(example) if d["kind"] == "Pod")
    assert pod["spec"]["containers"][0]["args"] == ["env; sleep 3600"]
    nvidia = next(d for d in Workload("w", ["01-single-gpu.yaml"], 1).documents(builtin("nvidia"))
                  if d["kind"] == "Pod")
    assert nvidia["spec"]["containers"][0]["args"] == ["nvidia-smi -L; sleep 3600"]


def test_nvidia_only_preflight_checks_are_not_applicable_by_capability():
    from draconf import preflight as pf
    for name in ("gpu-cluster", "policy-conflict"):
        r = pf.run_check(name, None, builtin("example"))  # reads nothing: no API needed
        assert r.ok and not r.blocking and r.status == "N/A"
        assert "capabilities." in r.summary and "profile example" in r.summary


def test_gpu_nodes_by_the_profiles_labels():
    from draconf import preflight as pf
    nodes = [("a", {"nvidia.com/gpu.present": "true"}), ("b", {"amd.com/gpu.present": "true"})]
    assert pf.gpu_node_names(nodes) == ["a"]
    assert pf.gpu_node_names(nodes, [], {"amd.com/gpu.present": "true"}) == ["b"]
    assert pf.gpu_node_names(nodes, ["c"], {}) == ["c"]


def test_pod_security_defaults_to_restricted_and_rejects_an_unknown_level():
    from draconf.errors import DraconfError
    from draconf.profile import builtin, from_dict
    assert builtin("nvidia").pod_security == builtin("example").pod_security == "restricted"
    assert from_dict({"podSecurity": "baseline"}).pod_security == "baseline"
    with pytest.raises(DraconfError, match="podSecurity"):
        from_dict({"podSecurity": "lenient"})


def test_a_relaxed_profile_lets_the_workload_run_as_the_images_user():
    from draconf.profile import from_dict
    from draconf.workload import Workload
    relaxed = from_dict({"podSecurity": "baseline"})
    (pod,) = [d for d in Workload("single-gpu", ["01-single-gpu.yaml"], 1).documents(relaxed) if d["kind"] == "Pod"]
    assert "runAsNonRoot" not in pod["spec"].get("securityContext", {})
    assert pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    (pod,) = [d for d in Workload("single-gpu", ["01-single-gpu.yaml"], 1).documents(from_dict({}))
              if d["kind"] == "Pod"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
