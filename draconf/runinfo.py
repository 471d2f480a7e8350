"""What a report says about the run: target, server, versions, driver and the published fleet.

>>> from draconf.devices import Device
>>> fleet = [Device("gpu.nvidia.com", "n1", f"gpu-{i}", "n1", {"gpu.nvidia.com/productName": "H100"})
...          for i in range(2)]
>>> inventory_summary(fleet, "productName")
{'n1': '2 x H100'}
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

ENV = "DRACONF_RUN_INFO"


def inventory_summary(devices, model_attribute: str | None) -> dict[str, str]:
    """Node -> ``"<count> x <model>"`` (models joined with " + " on a mixed node)."""
    per_node: dict[str, Counter] = defaultdict(Counter)
    for d in devices:
        per_node[d.node or d.pool][(d.attribute(model_attribute) if model_attribute else None) or "unknown model"] += 1
    return {node: " + ".join(f"{n} x {model}" for model, n in sorted(models.items()))
            for node, models in sorted(per_node.items())}


def collect(api, profile, target: str, run_id: str) -> dict:
    from draconf.devices import PublishedDevices
    version = api.version.get_code()
    published = PublishedDevices.read(api, profile.driver)
    return {"target": target, "server": api.host, "kubernetes_version": version.git_version,
            "profile": profile.name, "driver": profile.driver, "device_class": profile.device_class,
            "run_id": run_id, "pod_security": profile.pod_security,
            "inventory": inventory_summary(published, profile.attributes.get("model"))}


def to_env(info: dict) -> dict[str, str]:
    """Hand run info from ``draconf run`` to pytest (and every xdist worker) via the environment."""
    return {ENV: json.dumps(info)}


def from_env() -> dict | None:
    text = os.environ.get(ENV)
    return json.loads(text) if text else None
