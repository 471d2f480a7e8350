"""The MIG scenarios' workload (``suites/test_mig.py``, ``manifests/features/6x-mig-*.yaml``): the
builder's documents, with each MIG request kept on DeviceClass ``mig.nvidia.com`` and aimed at
the profile (and parent GPU) the scenario chose from the published MIG devices."""

from __future__ import annotations

from dataclasses import dataclass, field

from draconf import manifests
from draconf.builder import Workload, claim_spec
from draconf.mig import MIG_DEVICE_CLASS, PARENT_ATTRIBUTE, PROFILE_ATTRIBUTE


@dataclass
class MigWorkload(Workload):
    """Manifests with MIG requests: a request written for DeviceClass ``mig.nvidia.com`` keeps
    that class (the builder gives every other request the profile's), and its selector becomes
    ``profile == <profiles[request]>`` (and ``parentUUID == <parent>`` when set).

    >>> from draconf.profile import builtin
    >>> docs = MigWorkload("mig", ["features/63-mig-on-whole-gpu.yaml"], 1, profiles={"mig": "2g.20gb"},
    ...                    parent="GPU-1").documents(builtin("nvidia"))
    >>> exactly = docs[0]["spec"]["devices"]["requests"][0]["exactly"]
    >>> exactly["deviceClassName"], exactly["selectors"][0]["cel"]["expression"]
    ('mig.nvidia.com', "device.attributes['gpu.nvidia.com'].profile == '2g.20gb' && device.attributes['gpu.nvidia.com'].parentUUID == 'GPU-1'")
    """
    profiles: dict[str, str] = field(default_factory=dict)
    parent: str | None = None

    def documents(self, profile):
        written = set()
        for name in self.manifests:
            for doc in manifests.load(name):
                spec = claim_spec(doc)
                for r in (spec or {}).get("devices", {}).get("requests", []):
                    if (r.get("exactly") or {}).get("deviceClassName") == MIG_DEVICE_CLASS:
                        written.add((doc["metadata"]["name"], r["name"]))
        docs = super().documents(profile)
        for doc in docs:
            spec = claim_spec(doc)
            for r in (spec or {}).get("devices", {}).get("requests", []):
                if (doc["metadata"]["name"], r["name"]) not in written:
                    continue
                exactly = r["exactly"]
                exactly["deviceClassName"] = MIG_DEVICE_CLASS
                terms = []
                if r["name"] in self.profiles:
                    terms.append(f"device.attributes['{profile.domain}'].{PROFILE_ATTRIBUTE} == "
                                 f"'{self.profiles[r['name']]}'")
                if self.parent:
                    terms.append(f"device.attributes['{profile.domain}'].{PARENT_ATTRIBUTE} == '{self.parent}'")
                if terms:
                    exactly["selectors"] = [{"cel": {"expression": " && ".join(terms)}}]
        return docs
