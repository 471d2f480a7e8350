"""dra-example-driver on the bed's real nodes, installed from its own Helm chart.

``draconf testbed up --driver example`` installs kubernetes-sigs/dra-example-driver (the
reference DRA driver of SIG Node) the way a user does: its kubelet plugin built from the Go
module into a local image, its chart rendered by ``helm template`` with the image overridden,
the rendered objects applied.  Nothing of the driver is written here: its DeviceClass, RBAC,
ValidatingAdmissionPolicy, DaemonSet, what it publishes and what its CDI specs inject are the
chart's and the plugin's own.  The suite then judges a driver it was not written alongside.

Its devices are ``gpu.example.com`` GPUs (``gpu-0`` ... ``gpu-7`` per node by default), and its
CDI edits give a container environment variables naming the devices it received
(``GPU_DEVICE_<n>=gpu-<i>``), not device nodes.

>>> helm_args("/chart", "draconf.local/dra-example-driver:v0.2.1", "v1.36.3", ["resource.k8s.io/v1"])[:8]
['template', 'dra-example-driver', '/chart', '--namespace', 'dra-example-driver', '--kube-version', 'v1.36.3', '--api-versions']
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException

from draconf.errors import DraconfError

DRIVER = "gpu.example.com"
NAMESPACE = "dra-example-driver"
RELEASE = "dra-example-driver"
DEVICE_CLASS = "gpu.example.com"
#: The chart's DaemonSet ("<fullname>-kubeletplugin") and its pods' component label.
PLUGIN_DAEMONSET = f"{RELEASE}-kubeletplugin"
PLUGIN_SELECTOR = "app.kubernetes.io/component=kubeletplugin"


#: The chart's kubelet plugin runs on every node by default.  On a KWOK node kwok reports the
#: plugin's pod Running and Ready while nothing runs, so that node would look like a GPU node
#: whose plugin publishes nothing (preflight resource-slices rightly fails that).  A user keeps a
#: driver off nodes that cannot run it with the chart's own value; so does the bed.
REAL_NODES_ONLY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["kwok"]}]}]}}}


def helm_args(chart: str | Path, image: str | None, kube_version: str, api_versions: list[str]) -> list[str]:
    """``helm template`` arguments: the chart's defaults, but the image the bed built.

    ``--kube-version`` and ``--api-versions`` pass what the bed's API server reports, so the
    chart renders (and checks its ``kubeVersion``) as it would when installed against it.
    ``image`` None keeps the chart's own image and pull policy (a kind cluster pulls it from
    registry.k8s.io).

    >>> helm_args("/chart", None, "v1.34.0", [])[-4:]
    ['--kube-version', 'v1.34.0', '--set-json', 'kubeletPlugin.affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["kwok"]}]}]}}}']
    """
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE, "--kube-version", kube_version]
    for version in api_versions:
        args += ["--api-versions", version]
    affinity = ["--set-json", f"kubeletPlugin.affinity={json.dumps(REAL_NODES_ONLY)}"]
    if image is None:
        return args + affinity
    repository, tag = image.rsplit(":", 1)
    return args + ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
                   "--set", "image.pullPolicy=Never", *affinity]


def cluster_facts(api) -> tuple[str, list[str]]:
    """The API server's version, and every group/version it serves (``helm --api-versions``)."""
    groups = client.ApisApi(api.api_client).get_api_versions().groups
    return api.version.get_code().git_version, ["v1"] + [v.group_version for g in groups for v in g.versions]


def render(helm: Path, chart: Path, image: str | None, kube_version: str, api_versions: list[str]) -> list[dict]:
    """The chart's objects, rendered by helm; a chart helm refuses is a clear error."""
    proc = subprocess.run([str(helm), *helm_args(chart, image, kube_version, api_versions)],
                          capture_output=True, text=True, env={"HOME": "/nonexistent", "PATH": ""})
    if proc.returncode != 0:
        raise DraconfError(f"helm template of {chart} failed: {proc.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def install(api, docs: list[dict]) -> None:
    """Apply the rendered chart, as ``helm install`` would: its namespace first."""
    try:
        api.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    except ApiException as err:
        if err.status != 409:
            raise
    for doc in docs:
        try:
            utils.create_from_dict(api.api_client, doc, namespace=NAMESPACE)
        except utils.FailToCreateError as err:
            if any(getattr(e, "status", None) != 409 for e in err.api_exceptions):
                raise DraconfError(f"applying {doc['kind']} {doc['metadata']['name']} of the "
                                   f"dra-example-driver chart failed: {err}") from err
