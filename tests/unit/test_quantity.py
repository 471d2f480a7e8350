"""Quantities are parsed by kubernetes.utils (every suffix the API server accepts) and written
back by draconf.quantity.format_binary; a capacity in any valid form is never dropped."""

from __future__ import annotations

from decimal import Decimal

import pytest
from kubernetes import client
from kubernetes.utils import parse_quantity

from draconf.devices import devices_from_slices
from draconf.errors import DraconfError
from draconf.quantity import format_binary
from draconf.testbed import inventory


@pytest.mark.parametrize("text, value", [
    ("100m", Decimal("0.1")),
    ("81559Mi", 81559 * 2**20),
    ("40Gi", 40 * 2**30),
    ("1e3", 1000),
    ("1.5k", 1500),
    ("80G", 80 * 10**9),
    (85899345920, 85899345920),
])
def test_parse(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "ten", "5Xi", "1ki", "Gi"])
def test_parse_rejects(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize("value, text", [
    (81559 * 2**20, "81559Mi"),
    (40 * 2**30, "40Gi"),
    (85899345920, "80Gi"),
    (parse_quantity("1e3"), "1000"),
    (1000, "1000"),
    (parse_quantity("100m"), "100m"),
    (0, "0"),
    (2**60, "1Ei"),
])
def test_format_binary(value, text):
    assert format_binary(value) == text
    assert parse_quantity(text) == value


def _slice(capacity: dict[str, str]) -> client.V1ResourceSlice:
    return client.V1ResourceSlice(
        metadata=client.V1ObjectMeta(name="node-a-gpu.nvidia.com"),
        spec=client.V1ResourceSliceSpec(
            driver="gpu.nvidia.com", node_name="node-a",
            pool=client.V1ResourcePool(name="node-a", generation=1, resource_slice_count=1),
            devices=[client.V1Device(name="gpu-0", capacity={
                k: client.V1DeviceCapacity(value=v) for k, v in capacity.items()})]))


def test_a_published_capacity_in_any_valid_form_is_kept():
    [device] = devices_from_slices([_slice({"memory": "81559Mi", "cores": "100m",
                                            "example.com/bandwidth": "1e3"})])
    assert device.memory("memory") == 81559 * 2**20
    assert device.capacity["gpu.nvidia.com/cores"] == Decimal("0.1")
    assert device.capacity["example.com/bandwidth"] == 1000


def _inventory(memory) -> dict:
    return {"models": {"m": {"productName": "X", "architecture": "Hopper", "memory": memory}},
            "nodes": [{"name": "gpu-0", "gpus": 1, "model": "m"}]}


@pytest.mark.parametrize("memory, size", [("81559Mi", 81559 * 2**20), ("40Gi", 40 * 2**30), ("1e3", 1000)])
def test_inventory_memory(memory, size):
    [node] = inventory.from_dict(_inventory(memory)).nodes
    assert node.gpus[0].model.memory_bytes == size and type(node.gpus[0].model.memory_bytes) is int


@pytest.mark.parametrize("memory", ["100m", "lots", "0"])
def test_inventory_memory_must_be_whole_bytes(memory):
    with pytest.raises(DraconfError, match="model 'm'"):
        inventory.from_dict(_inventory(memory))
