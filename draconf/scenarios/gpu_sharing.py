"""gpu-sharing (``47-gpu-sharing.yaml``, NVIDIA quickstart gpu-test5): the workload, where it
may run (the driver's sharing gates), the MPS control daemon the driver starts, and what each
container shows of its request's sharing config (draconf/sharing.py judges it)."""

from __future__ import annotations

from dataclasses import dataclass

from draconf import capabilities
from draconf.workload import Workload

SHARING_WORKLOAD = "gpu-sharing"
SHARING_TEMPLATE = "multiple-gpus"

#: 48-gpu-sharing-invalid.yaml: claim (and pod) name -> what the driver's refusal must name.
INVALID_CONFIGS = {"bad-field": "quantum", "bad-strategy": "Exclusive"}

#: How long an invalid config's pod is watched for the driver's refusal.
INVALID_VERDICT_TIMEOUT = 60


@dataclass
class SharingWorkload(Workload):
    """A manifest whose claims' opaque configs go to the profile's driver."""

    def documents(self, profile):
        docs = super().documents(profile)
        for doc in docs:
            spec = doc.get("spec") or {}
            spec = spec.get("spec", spec) if doc["kind"] == "ResourceClaimTemplate" else spec
            for config in (spec.get("devices") or {}).get("config") or []:
                if config.get("opaque"):
                    config["opaque"]["driver"] = profile.driver
        return docs


def sharing_target(request, cluster, profile, published, avoid, gpus: int, needs_gates: bool = True) -> list[str]:
    """The nodes the sharing scenarios may run on, or a skip with the reason (a failure where
    the run expects GPU sharing: ``--expect-feature gpu-sharing``).  ``needs_gates``: only
    nodes whose plugin runs with the driver's sharing gates on (a config meant to be refused
    is refused with them off too)."""
    capability, nodes = capabilities.gpu_sharing(cluster, profile, published, avoid, gpus, needs_gates)
    request.getfixturevalue("expected_features").require("gpu-sharing", capability)
    return nodes


def mps_daemon_deployments(api, profile) -> list[dict]:
    """The Deployments named like MPS control daemons in the driver's namespaces: those of the
    profile's kubelet-plugin DaemonSets, and wherever the plugin's pods actually run (a driver
    installed under another release name or namespace starts its daemons there; a namespace
    that does not exist holds none)."""
    from kubernetes.client.exceptions import ApiException

    from draconf.preflight.nodes import read_plugin_pods
    from draconf.sharing import MPS_DAEMON_PREFIX
    _, plugin_pods = read_plugin_pods(api, profile.plugin)
    out = []
    for namespace in dict.fromkeys([*profile.plugin.namespaces, *sorted({p.namespace for p in plugin_pods})]):
        try:
            items = api.apps.list_namespaced_deployment(namespace).items
        except ApiException as err:
            if err.status == 404:
                continue
            raise
        out += [api.api_client.sanitize_for_serialization(d) for d in items
                if d.metadata.name.startswith(MPS_DAEMON_PREFIX)]
    return out


def sharing_evidence(deployed, profile) -> tuple[list[str], list[str], list[str]]:
    """Run :data:`draconf.sharing.PROBE` in every container of a sharing request; the evidence
    lines, the problems :func:`draconf.sharing.judge` finds, and a line per request."""
    from draconf import sharing
    from draconf.pods import exec_in_container, request_matches
    claims = deployed.claims()
    evidence, problems, summary = [], [], []
    for pod in deployed.pods():
        names = pod.claim_names()
        groups: dict[tuple[str, str], dict] = {}
        for container in pod.containers:
            for ref, request in pod.container_claim_requests(container):
                claim = claims.get(names.get(ref, ""))
                if claim is None:
                    continue
                configs = sharing.sharing_configs(claim.raw, profile.driver)
                wanted = next((cfg for req, cfg in configs.items() if req and request and
                               request_matches(request, req)), configs.get(""))
                if wanted is None:
                    continue
                result = exec_in_container(deployed.api, deployed.namespace, pod.name, container,
                                           list(sharing.PROBE), timeout=profile.timeouts.exec)
                view = sharing.parse_probe(result.stdout)
                evidence.append(f"{pod.name}/{container} ({claim.name}, request {request}: {wanted.strategy}"
                                f"{' ' + wanted.interval if wanted.interval else ''}) -> modes {view.modes}, "
                                f"time slices {view.time_slices}, CUDA_MPS_PIPE_DIRECTORY="
                                f"{view.mps_pipe_directory or '(unset)'}, control pipe {view.mps_control_pipe}"
                                f": sees {result.describe()}")
                group = groups.setdefault((claim.name, request or ""), {"sharing": wanted, "views": {},
                                                                        "uid": claim.uid, "node": pod.node})
                group["views"][container] = view
        for (claim_name, request), group in sorted(groups.items()):
            problems += [f"{claim_name}/{request}: {p}" for p in sharing.judge(group["sharing"], group["views"])]
            if group["sharing"].strategy == sharing.MPS:
                # The containers' pipe is the daemon's only if the daemon runs: upstream's driver
                # starts it as a Deployment in its namespace, on the pod's node.
                found, line = sharing.judge_mps_daemon(group["uid"], group["node"],
                                                       mps_daemon_deployments(deployed.api, profile))
                problems += [f"{claim_name}/{request}: {p}" for p in found]
                evidence.append(f"{claim_name}/{request} MPS control daemon: {line}")
                group["daemon"] = line
            views, cfg = group["views"], group["sharing"]
            gpus = sorted({u for v in views.values() for u in v.uuids})
            modes = sorted({m for v in views.values() for m in v.modes.values()})
            slices = sorted({t for v in views.values() for t in v.time_slices.values()})
            summary.append(f"request {request} ({cfg.strategy}{' ' + cfg.interval if cfg.interval else ''}): "
                           f"{', '.join(sorted(views))} see {', '.join(gpus)}, compute mode {'/'.join(modes)}, "
                           f"time slice {'/'.join(slices) or '?'}"
                           + (f", CUDA_MPS_PIPE_DIRECTORY={sharing.MPS_PIPE_DIRECTORY} with its control pipe, "
                              f"MPS control daemon {group.get('daemon')}"
                              if cfg.strategy == sharing.MPS and not problems else ""))
    if not evidence:
        problems.append("no container lists a request with a GpuConfig sharing config")
    return evidence, problems, summary
