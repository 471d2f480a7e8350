"""``--all-models``: the model and memory classes enumerated from the published devices (pure
functions of draconf/scenarios/walkthrough.py over PublishedDevices), and the workload each class gets."""

from pathlib import Path

import pytest

from draconf.scenarios import walkthrough
from draconf.devices import Device, PublishedDevices
from draconf.profile import resolve

DRIVER = "gpu.nvidia.com"
GI = 2**30
H100, A100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA H200"


SUITE = walkthrough


def gpu(n: int, product: str | None, memory: int | None, node: str = "node-a") -> Device:
    attrs = {f"{DRIVER}/type": "gpu", f"{DRIVER}/uuid": f"GPU-{node}-{n}"}
    if product is not None:
        attrs[f"{DRIVER}/productName"] = product
    caps = {f"{DRIVER}/memory": memory} if memory is not None else {}
    return Device(DRIVER, node, f"gpu-{n}", node, attrs, caps)


#: The default bed's fleet: 4 H100, 2 A100, 2 H200 (memory as the inventory publishes it).
FLEET = PublishedDevices(DRIVER, [
    *(gpu(i, H100, 81559 * 2**20, "gpu-h100-0") for i in range(4)),
    *(gpu(i, A100, 40 * GI, "gpu-a100-0") for i in range(2)),
    *(gpu(i, H200, 143771 * 2**20, "gpu-h200-0") for i in range(2)),
])


@pytest.mark.parametrize("product, slug", [
    (H100, "h100-80gb-hbm3"), (A100, "a100-sxm4-40gb"), (H200, "h200"),
    ("Tesla T4", "tesla-t4"), ("NVIDIA", "nvidia"), ("", "unnamed"),
])
def test_class_slug(product, slug):
    assert SUITE.class_slug(product) == slug


def test_model_classes_one_per_published_product_name():
    assert SUITE.model_classes(FLEET, resolve("nvidia")) == {
        "model-selected/a100-sxm4-40gb": A100,
        "model-selected/h100-80gb-hbm3": H100,
        "model-selected/h200": H200,
    }


def test_memory_classes_one_per_distinct_size_smallest_first():
    assert SUITE.memory_classes(FLEET, resolve("nvidia")) == {
        "memory-selected/40Gi": 40 * GI,
        "memory-selected/81559Mi": 81559 * 2**20,
        "memory-selected/143771Mi": 143771 * 2**20,
    }


def test_all_workloads_puts_each_class_after_its_workload():
    classes = {"model-selected": ["model-selected/a100-sxm4-40gb", "model-selected/h100-80gb-hbm3",
                                  "model-selected/h200"],
               "memory-selected": ["memory-selected/40Gi", "memory-selected/81559Mi", "memory-selected/143771Mi"]}
    # WORKLOADS in their order (a workload added there changes nothing here), each class after its own.
    assert SUITE.all_workloads(FLEET, resolve("nvidia")) == [
        n for name in SUITE.WORKLOADS for n in [name, *classes.get(name, [])]]
    assert SUITE.WORKLOADS[:4] == ["single-gpu", "model-selected", "memory-selected", "two-gpu"]


def test_a_uniform_fleet_has_one_class_of_each():
    uniform = PublishedDevices(DRIVER, [gpu(i, H100, 80 * GI) for i in range(8)])
    assert SUITE.all_workloads(uniform, resolve("nvidia"))[1:5] == [
        "model-selected", "model-selected/h100-80gb-hbm3", "memory-selected", "memory-selected/80Gi"]


def test_unpublished_attributes_give_no_classes():
    bare = PublishedDevices(DRIVER, [gpu(0, None, None), gpu(1, None, None)])
    assert SUITE.model_classes(bare, resolve("nvidia")) == {}
    assert SUITE.memory_classes(bare, resolve("nvidia")) == {}
    assert SUITE.all_workloads(bare, resolve("nvidia")) == SUITE.WORKLOADS
    assert SUITE.all_workloads(PublishedDevices(DRIVER, []), resolve("nvidia")) == SUITE.WORKLOADS


def test_a_profile_without_a_model_attribute_has_no_model_classes():
    profile = resolve("nvidia")
    no_model = type(profile)(**{**profile.__dict__, "attributes": {
        k: v for k, v in profile.attributes.items() if k != "model"}})
    assert SUITE.model_classes(FLEET, no_model) == {}
    assert len(SUITE.memory_classes(FLEET, no_model)) == 3


@pytest.mark.parametrize("name, product", [
    ("model-selected/a100-sxm4-40gb", A100), ("model-selected/h100-80gb-hbm3", H100),
    ("model-selected/h200", H200)])
def test_a_model_class_selects_exactly_its_product(name, product):
    workload = SUITE.build_workload(name, FLEET, resolve("nvidia"))
    assert workload.name == name and workload.manifests == ["02-model-selected.yaml"]
    [selector] = workload.selectors["h100-gpu"]
    assert {d.attribute("productName") for d in FLEET if selector.matches(d)} == {product}
    # A longer name with the same start is another class, not this one.
    assert not selector.matches(gpu(9, product + " NVL", 80 * GI))


@pytest.mark.parametrize("name, size", [
    ("memory-selected/40Gi", 40 * GI), ("memory-selected/81559Mi", 81559 * 2**20),
    ("memory-selected/143771Mi", 143771 * 2**20)])
def test_a_memory_class_selects_exactly_its_size(name, size):
    workload = SUITE.build_workload(name, FLEET, resolve("nvidia"))
    assert workload.manifests == ["03-memory-selected.yaml"] and workload.expected_pods == 1
    [selector] = workload.selectors["large-memory-gpu"]
    chosen = [d for d in FLEET if selector.matches(d)]
    assert chosen and {d.memory("memory") for d in chosen} == {size}
    assert len(chosen) < len(FLEET)  # some but not all GPUs: the selector decides


def test_a_class_no_longer_published_is_a_finding():
    only_h100 = PublishedDevices(DRIVER, [gpu(0, H100, 81559 * 2**20)])
    with pytest.raises(SUITE.NotBuildable, match="model class 'model-selected/h200'"):
        SUITE.build_workload("model-selected/h200", only_h100, resolve("nvidia"))
    with pytest.raises(SUITE.NotBuildable, match="memory class 'memory-selected/40Gi'"):
        SUITE.build_workload("memory-selected/40Gi", only_h100, resolve("nvidia"))


def test_the_default_workloads_are_built_as_before():
    """The flag adds workloads; the six default ones keep their names and selectors."""
    model = SUITE.build_workload("model-selected", FLEET, resolve("nvidia"))
    assert model.name == "model-selected" and "h100" in model.selectors["h100-gpu"][0].cel
    memory = SUITE.build_workload("memory-selected", FLEET, resolve("nvidia"))
    assert memory.expected_pods == 2 and "isGreaterThan" in memory.selectors["large-memory-gpu"][0].cel


def _collect(*args, state_dir):
    import os
    import subprocess
    import sys
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DRACONF_STATE_DIR": str(state_dir), "PYTHONPATH": str(repo)}
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=--import-mode=importlib", str(repo / "suites"), *args],
                          capture_output=True, text=True, env=env, cwd=repo, timeout=120)


def test_collection_without_the_flag_needs_no_cluster(tmp_path):
    done = _collect(state_dir=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "model-selected/" not in done.stdout and "memory-selected/" not in done.stdout


def test_the_flag_without_a_cluster_is_one_line(tmp_path):
    done = _collect("--draconf-all-models", state_dir=tmp_path)
    assert done.returncode == 4
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert lines == ["ERROR: draconf: --all-models reads the published devices to collect the model and "
                     "memory classes, and cannot: test bed 'default' is not up (start it with "
                     "`draconf testbed up`, or use `draconf run --all-models`)"]
