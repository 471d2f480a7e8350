"""The bed's MIG description: inventory ``mig:`` and ``dynamicMIG``, what NVML reports (nvml.json),
and the driver's DynamicMIG gate in the DaemonSet (the simulated plugin's side is Go:
gomod/gpu-driver, ``go test ./...``)."""

import pytest

from draconf.errors import DraconfError
from draconf.testbed import inventory, nvidia

MIG_FLEET = inventory.DEFAULT_INVENTORY.with_name("mixed-mig.yaml")


def test_the_default_fleet_keeps_dynamic_mig_off_and_the_mig_fleet_turns_it_on():
    default, mig = inventory.load(inventory.GUIDE_INVENTORY), inventory.load(MIG_FLEET)
    assert not default.dynamic_mig and default.mig_gpus == ()
    assert mig.dynamic_mig and [g.node for g in mig.mig_gpus] == ["gpu-h100-0"] * 4
    # Same nodes and GPUs: only the gate differs.
    assert [(n.name, len(n.gpus)) for n in default.nodes] == [(n.name, len(n.gpus)) for n in mig.nodes]
    assert inventory.with_node_kind(mig, "kwok").dynamic_mig


def test_nvml_data_carries_the_profiles_and_the_driver_root_the_capability_nodes():
    node = inventory.load(MIG_FLEET).node("gpu-h100-0")
    gpu = nvidia.nvml_data(node)["gpus"][0]
    profiles = {p["name"]: p for p in gpu["mig"]["profiles"]}
    assert gpu["mig"]["memorySlices"] == 8 and set(profiles) == {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
    assert profiles["1g.10gb"] == {"name": "1g.10gb", "id": 19, "memoryMiB": 9984, "multiprocessors": 16,
                                   "copyEngines": 1, "decoders": 1, "encoders": 0, "jpegEngines": 1,
                                   "ofaEngines": 0, "size": 1, "placements": [0, 1, 2, 3, 4, 5, 6]}
    a100 = nvidia.nvml_data(inventory.load(MIG_FLEET).node("gpu-a100-0"))["gpus"][0]
    assert "mig" not in a100
    # As /proc/driver/nvidia-caps/mig-minors: 15 GPU instances, each its access and its first CI's.
    assert len(nvidia.cap_minors(1)) == 30 and nvidia.cap_minors(1)[:2] == [138, 139]


def test_the_daemonset_sets_the_chart_feature_gate_only_with_dynamic_mig():
    def env(ds):
        return {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "FEATURE_GATES" not in env(nvidia.plugin_daemonset([], {}))
    on = env(nvidia.plugin_daemonset(["mig-counters-ignored"], {}, {"DynamicMIG": True}))
    assert on["FEATURE_GATES"] == "DynamicMIG=true," and on["SIMULATE_FAULTS"] == "mig-counters-ignored"


@pytest.mark.parametrize("mig, message", [
    ({"memorySlices": 8}, "needs a positive `memorySlices` and a list of `profiles`"),
    ({"memorySlices": 8, "profiles": [{"name": "7g", "id": 0, "memory": "1Gi", "multiprocessors": 1,
                                       "size": 8, "placements": [1]}]}, "outside 8 memory slices"),
    ({"memorySlices": 8, "profiles": [{"name": "1g", "id": 19, "memory": "1Gi", "multiprocessors": 1,
                                       "size": 1, "placements": list(range(8)) * 2}]}, "16 MIG placements"),
])
def test_mistakes_in_a_mig_block_name_the_model(mig, message):
    data = {"models": {"m": {"productName": "P", "architecture": "A", "memory": "1Gi", "mig": mig}},
            "nodes": [{"name": "n", "model": "m", "gpus": 1}]}
    with pytest.raises(DraconfError, match=f"model 'm': .*{message}"):
        inventory.from_dict(data)


def test_dynamic_mig_must_be_a_boolean():
    with pytest.raises(DraconfError, match="dynamicMIG"):
        inventory.from_dict({"dynamicMIG": "yes", "nodes": [{"name": "n"}]})
