"""The walkthrough's six workloads as the suite declares and checks them.

``suites/test_workloads.py`` applies each and asks the three checks below; the feature
workloads (``suites/test_features.py``) ask the same three of theirs.  Declaring:
:func:`build_workload` writes each workload for what the cluster publishes (the model-selected
workload asks for a model that exists, the memory-selected one for a threshold some but not
all GPUs pass; ``--all-models`` adds one per published class, :func:`all_workloads`).
Checking: :func:`check_allocation`, :func:`check_cdi_injection`, :func:`check_cleanup`, each
over the :class:`~draconf.workload.Start` the suite's ``started`` fixture made.
"""

from __future__ import annotations

import re

import allure
import pytest

from draconf import manifests
from draconf import selectors as sel
from draconf.errors import CheckFailed, NoVerdict
from draconf.quantity import format_binary
from draconf.reporting import show_templated
from draconf.workload import Start, Workload, prove_allocatable

WORKLOADS = ["single-gpu", "model-selected", "memory-selected", "two-gpu", "shared-claim", "deployment"]
CHECKS = ["allocation", "cdi-injection", "cleanup"]


class NotBuildable(CheckFailed):
    """The workload cannot be written for this cluster: what it selects on is not published."""


def choose_model(published, profile) -> str:
    """The most common published product name (ties: alphabetical)."""
    counts = published.values_of(profile.attributes["model"])
    if not counts:
        raise NotBuildable(f"no published device has the {profile.attributes['model']!r} attribute, so no model "
                           "can be selected", code="attribute-missing")
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def memory_sizes(devices, profile) -> list[int]:
    """The published memory sizes of ``devices``; none published is a finding, not a reason to
    drop the memory selector (the workload would silently become a plain single-GPU one)."""
    sizes = [d.memory(profile.memory_capacity) for d in devices if d.memory(profile.memory_capacity)]
    if not sizes:
        raise NotBuildable(f"no published device has the capacity {profile.memory_capacity!r}, so no memory "
                           "selector can be written", code="attribute-missing")
    return sizes


def memory_threshold(sizes: list[int]) -> int:
    """A floor that the largest GPUs pass and the smallest do not (half the size if uniform)."""
    distinct = sorted(set(sizes))
    return distinct[-2] if len(distinct) > 1 else distinct[0] // 2


#: ``--all-models``: these workloads run once more per published class (``<workload>/<class>``).
CLASS_WORKLOADS = ("model-selected", "memory-selected")


def class_slug(product_name: str) -> str:
    """A model class's name in test ids and report rows: the product name, lowercase, without
    the vendor, punctuation and spaces as ``-`` (``NVIDIA A100-SXM4-40GB``: ``a100-sxm4-40gb``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", product_name.lower()).strip("-")
    return slug.removeprefix("nvidia-") or slug or "unnamed"


def model_classes(published, profile) -> dict[str, str]:
    """``model-selected/<slug>`` -> product name, for every product name ``published`` devices
    publish (none when the profile has no model attribute)."""
    if not profile.has("model"):
        return {}
    names = sorted(str(v) for v in published.values_of(profile.attributes["model"]))
    return {f"model-selected/{class_slug(n)}": n for n in names}


def memory_classes(published, profile) -> dict[str, int]:
    """``memory-selected/<size>`` -> size in bytes, for every distinct memory size published,
    smallest first (``81559Mi``: the quantity as the selector writes it)."""
    sizes = sorted({int(d.memory(profile.memory_capacity)) for d in published
                    if d.memory(profile.memory_capacity)})
    return {f"memory-selected/{format_binary(size)}": size for size in sizes}


def all_workloads(published, profile) -> list[str]:
    """WORKLOADS with each class workload right after its own (``--all-models``)."""
    classes = {"model-selected": list(model_classes(published, profile)),
               "memory-selected": list(memory_classes(published, profile))}
    return [n for name in WORKLOADS for n in [name, *classes.get(name, [])]]


def build_class_workload(name: str, published, profile) -> Workload:
    """One class of ``--all-models``: the workload's first manifest with a selector that only
    that class passes (exactly that product name; exactly that memory size)."""
    domain, attrs, memory = profile.domain, profile.attributes, profile.memory_capacity
    if name.startswith("model-selected/"):
        product = model_classes(published, profile).get(name)
        if product is None:
            raise NotBuildable(f"no published device is of model class {name!r} any more")
        return Workload(name, ["02-model-selected.yaml"], expected_pods=1,
                        selectors={"h100-gpu": [sel.model_exactly(domain, attrs["model"], product)]})
    size = memory_classes(published, profile).get(name)
    if size is None:
        raise NotBuildable(f"no published device is of memory class {name!r} any more")
    return Workload(name, ["03-memory-selected.yaml"], expected_pods=1,
                    selectors={"large-memory-gpu": [sel.memory_exactly(domain, memory, size)]})


def build_workload(name: str, published, profile) -> Workload:
    domain, attrs, memory = profile.domain, profile.attributes, profile.memory_capacity
    if name.split("/")[0] in CLASS_WORKLOADS and "/" in name:
        return build_class_workload(name, published, profile)
    if name == "single-gpu":
        return Workload(name, ["01-single-gpu.yaml"], expected_pods=1)
    if name == "model-selected":
        if not profile.has("model"):
            pytest.skip(f"model-selected selects by the model attribute: {profile.lacks('model')}")
        product = choose_model(published, profile)
        return Workload(name, ["02-model-selected.yaml"], expected_pods=1,
                        selectors={"h100-gpu": [sel.model(domain, attrs["model"], product)]})
    if name == "memory-selected":
        floor = sel.memory_above(domain, memory, memory_threshold(memory_sizes(published, profile)))
        # The combined form: the architecture of the largest GPU, above that architecture's
        # next-smaller memory size, so it picks the biggest cards of that family only.  A driver
        # that publishes no architecture gets the same attribute-and-capacity CEL on its model.
        family = "architecture" if profile.has("architecture") else "model"
        if not profile.has(family):
            pytest.skip("memory-selected's combined form needs an architecture or model attribute: "
                        + profile.lacks("architecture"))
        largest = max(published, key=lambda d: d.memory(memory) or 0)
        arch = largest.attribute(attrs[family])
        arch_sizes = memory_sizes([d for d in published
                                   if d.attribute(attrs[family]) == arch], profile)
        combined = sel.architecture_and_memory_above(domain, attrs[family], arch, memory,
                                                     memory_threshold(arch_sizes))
        return Workload(name, ["03-memory-selected.yaml", "04-architecture-and-memory.yaml"],
                        expected_pods=2, selectors={"large-memory-gpu": [floor],
                                                    "hopper-large-memory-gpu": [combined]})
    if name == "two-gpu":
        return Workload(name, ["05-two-gpus.yaml"], expected_pods=1)
    if name == "shared-claim":
        # Two pods x (own GPU) + one shared GPU: three devices on one node.  The scheduler places
        # the first pod without knowing about the second, so pin both to a node that has three.
        node, count = max(published.devices_per_node().items(), key=lambda kv: (kv[1], kv[0]))
        if count < 3:
            pytest.skip(f"shared-claim needs a node with 3 GPUs of {profile.driver}; the largest has {count}")
        return Workload(name, ["06-shared-claim.yaml"], expected_pods=2, node=node)
    if name == "deployment":
        return Workload(name, ["07-deployment.yaml"], expected_pods=2, pod_selector="app=gpu-worker")
    raise ValueError(name)


def check_allocation(request, started: Start, published_devices) -> None:
    """Every claim allocated published devices that satisfy its class and selectors, the right
    number, reserved for its pods.  Judged from the pods and claims even when the workload never
    started: an unplaced pod or an unallocated claim is the failure, with the cluster's reason."""
    deployed = started.deployed
    if deployed is None:  # nothing to deploy: what it would select on is not published
        raise CheckFailed(started.failure or "the workload was never deployed", code=started.code)
    # What the suite set in the files (docs/checks.md, "Templated fields"), with the values.
    show_templated(request.node, manifests.changes(deployed.workload.manifests, deployed.documents))
    attach_state(deployed)
    with allure.step("claims are allocated to published devices that satisfy the request"):
        attach_evidence("allocation", started.check_allocation(published_devices))


def check_cdi_injection(started: Start, published_devices) -> None:
    """``nvidia-smi -L`` (the profile's command) in every container lists exactly its GPUs."""
    if started.refused_by_node:
        # Allocated, and the node's driver will not hand the GPUs to the containers: the
        # promise this check holds is broken (its diagnosis reads the kubelet's events).
        raise started.failed(f"the containers never got their GPUs: {started.failure}")
    if started.never_started:
        raise NoVerdict(started.no_verdict_cause)
    with allure.step("nvidia-smi -L in every container lists exactly its allocated GPUs"):
        attach_evidence("nvidia-smi -L", started.running.check_injection(published_devices))


def check_cleanup(started: Start, published_devices, cluster, profile, run_id) -> None:
    """Once the consumers are deleted, generated claims are gone, named claims deallocated, and
    the freed devices allocatable again (a probe pod runs on them).  Never rerun (the caller
    marks it): a second attempt would find nothing left to release."""
    if started.never_started:
        raise NoVerdict(started.no_verdict_cause)
    deployed = started.running
    with allure.step("delete the consumers; claims are released and the devices reusable"):
        attach_evidence("cleanup", deployed.check_cleanup(
            published_devices, lambda devices: prove_allocatable(
                cluster, deployed.namespace, devices, profile, run_id.labels)))


def attach_state(deployed) -> None:
    """The applied manifests, claims and events, attached to the Allure result."""
    allure.attach(manifests.dump(deployed.documents), name="applied manifests",
                  attachment_type=allure.attachment_type.YAML)
    claims = [c.raw for c in deployed.claims().values()]
    allure.attach(manifests.dump(claims) if claims else "no claims", name="claims",
                  attachment_type=allure.attachment_type.YAML)
    allure.attach("\n".join(deployed.events()) or "no events", name="events",
                  attachment_type=allure.attachment_type.TEXT)


def attach_evidence(name: str, lines: list[str]) -> None:
    allure.attach("\n".join(lines) or "(none)", name=name, attachment_type=allure.attachment_type.TEXT)
