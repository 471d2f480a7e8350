"""The release's own Helm chart on the bed: the values a user with this cluster would set,
``helm template`` of it against the bed's API versions, and applying what it renders as
``helm install`` would (the bed has no Helm release state; ``external_faults`` renders it
again with changed values, as ``helm upgrade`` would)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import yaml

from draconf.errors import DraconfError
from draconf.testbed import build, example_driver, upstream_nvidia
from draconf.testbed.upstream_nvidia import DRIVER_ROOT, FEATURE_GATES, HEALTH_GATES, Built, Release, image_ref
from draconf.testbed.upstream_nvidia import RELEASES  # noqa: F401 - the doctests name a release by it


def chart_values(release: Release) -> dict:
    """The chart values the bed sets, as a user with this cluster would: the image it built (no
    registry: never pulled), the driver root, no ComputeDomains (no NVLink fabric here: the
    controller and compute-domain plugin stay out), GPUs on (the chart refuses that default
    without gpuResourcesEnabledOverride, templates/validation.yaml), and the feature gates
    for GPU sharing, and for device taints where the release has them.

    >>> chart_values(RELEASES["v0.4.0"])["image"]["repository"]
    'draconf.local/dra-driver-nvidia-gpu'
    >>> sorted(chart_values(RELEASES["v0.4.0"])["featureGates"]), sorted(chart_values(RELEASES["v25.12.0"])["featureGates"])
    (['MPSSupport', 'NVMLDeviceHealthCheck', 'TimeSlicingSettings'], ['MPSSupport', 'TimeSlicingSettings'])
    """
    repository, tag = image_ref(release).rsplit(":", 1)
    values = {"image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
              "nvidiaDriverRoot": DRIVER_ROOT,
              "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
              "gpuResourcesEnabledOverride": True,
              "featureGates": {**FEATURE_GATES, **(HEALTH_GATES if release.taints_unhealthy else {})}}
    if release.name_override:
        values["nameOverride"] = release.name_override
    return values


def helm_args(release: Release, chart: Path, values_file: Path, kube_version: str,
              api_versions: list[str]) -> list[str]:
    """``helm template`` of the release's chart with the bed's values file, CRDs included
    (``helm install`` installs a chart's ``crds/``), against the bed's API versions.

    >>> helm_args(RELEASES["v0.4.0"], Path("/c"), Path("/v.yaml"), "v1.36.3", ["v1"])[:6]
    ['template', 'dra-driver-nvidia-gpu', '/c', '--namespace', 'dra-driver-nvidia-gpu', '--include-crds']
    """
    args = ["template", release.release_name, str(chart), "--namespace", release.namespace,
            "--include-crds", "--values", str(values_file), "--kube-version", kube_version]
    for version in api_versions:
        args += ["--api-versions", version]
    return args


def render(helm: Path, built: Built, kube_version: str, api_versions: list[str], workdir: Path,
           changed: dict | None = None) -> list[dict]:
    """The chart rendered with the bed's values; ``changed``: values set over them, as
    ``helm upgrade --reuse-values --set`` would (a mapping merges into the bed's mapping)."""
    chosen = chart_values(built.release)
    for key, value in (changed or {}).items():
        chosen[key] = {**chosen[key], **value} if isinstance(value, dict) and isinstance(chosen.get(key), dict) \
            else value
    values = workdir / f"{built.release.release_name}-values.yaml"
    values.write_text(yaml.safe_dump(chosen, sort_keys=False))
    proc = subprocess.run([str(helm), *helm_args(built.release, built.chart, values, kube_version, api_versions)],
                          capture_output=True, text=True, env={"HOME": "/nonexistent", "PATH": ""})
    if proc.returncode != 0:
        raise DraconfError(f"helm template of {built.chart} failed: {proc.stderr.strip()}")
    (workdir / f"{built.release.release_name}-rendered.yaml").write_text(proc.stdout)
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def install(api, release: Release, docs: list[dict]) -> None:
    """Apply the rendered chart, as ``helm install --create-namespace`` would."""
    from kubernetes import utils
    from kubernetes.client.exceptions import ApiException
    try:
        api.core.create_namespace({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": release.namespace}})
    except ApiException as err:
        if err.status != 409:
            raise
    for doc in docs:
        try:
            utils.create_from_dict(api.api_client, doc, namespace=release.namespace)
        except utils.FailToCreateError as err:
            if any(getattr(e, "status", None) != 409 for e in err.api_exceptions):
                raise DraconfError(f"applying {doc['kind']} {doc['metadata']['name']} of the "
                                   f"{release.chart_name} chart failed: {err}") from err


def render_on_bed(bed, api, changed: dict | None = None, **release_changes) -> tuple[Release, list[dict]]:
    """The chart of the release ``bed`` runs, rendered again as ``helm upgrade`` (``changed``
    values) or a second ``helm install`` (``release_changes``: another ``release_name`` or
    ``namespace``) would: the release so placed, and its objects.  The builds are the bed's
    own, cached by its ``up``."""
    quiet = lambda *_: None  # noqa: E731
    bindir = build.ensure_built(log=quiet)
    state = bed.state()
    built = upstream_nvidia.ensure_built(upstream_nvidia.DRIVER_CHOICES[state["driver"]],
                                         upstream_nvidia.sources_dir(), bindir, log=quiet)
    placed = upstream_nvidia.installed_release(state)
    built = dataclasses.replace(built, release=dataclasses.replace(placed, **release_changes))
    docs = render(bindir / "example" / "helm", built, *example_driver.cluster_facts(api), workdir=bed.dir,
                  changed=changed)
    return built.release, docs
