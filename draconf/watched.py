"""The run's pods and every ResourceClaim of the cluster, followed by watches instead of polled.

A wait polls what it waits for; one workload polling its pod and claims twice a second costs
little, but the fleet sweep has 80 targets in flight, each polling its pod, its claims and,
to know which GPUs others hold, every claim of the cluster: at 100 nodes x 8 GPUs that was
some 30,000 requests, as much of the API server's CPU as of the client's.  A
:class:`WatchedRun` lists each kind once and then follows its changes
(:class:`draconf.reflector.Reflector`, as client-go's informers), and the waits read the
local copy.

What the waits read here is "what was last heard": it may lag the API server by the time an
event takes to arrive, and the pods and the claims arrive on two streams with no order between
them.  So a wait may end a little later than the cluster got there, never earlier (the copy
never shows a state the server has not been in).  No verdict is taken from it: the checks
read the API server once the wait has ended, and a wait reads the server before it gives a
verdict or times out (``confirm`` of :func:`draconf.waits.wait_until`;
:class:`draconf.workload.DeployedWorkload` keeps the two apart).

Watching needs ``watch`` on pods (this run's, by label) and on resourceclaims in every
namespace (manifests/rbac/clusterrole.yaml).  :meth:`WatchedRun.start` returns None when the
server refuses them (no permission) or the first lists do not arrive in time: then the waits
poll as before, which is slower, not wrong.
"""

from __future__ import annotations

import logging
import time

from kubernetes import client

from draconf.claims import Claim, held_devices
from draconf.kube import label_selector, new_client
from draconf.pods import Pod
from draconf.reflector import Reflector

log = logging.getLogger("draconf.watched")

#: Seconds the first list of each kind may take before the run falls back to polling.
SYNC_TIMEOUT = 30.0


class WatchedRun:
    """This run's pods (by its run-id label) and every claim, as last heard."""

    def __init__(self, api, run_labels: dict[str, str], run_prefix: str):
        # An ApiClient of its own: a watch holds its connection for minutes, and nothing may
        # call kubernetes.stream.stream on the client a watch lists with (draconf.reflector).
        own = new_client(api.api_client.configuration)
        self.run_prefix = run_prefix
        self.pods = Reflector(client.CoreV1Api(own).list_pod_for_all_namespaces, "pods",
                              label_selector=label_selector(run_labels))
        self.claims = Reflector(client.ResourceV1Api(own).list_resource_claim_for_all_namespaces,
                                "resourceclaims")

    @classmethod
    def start(cls, api, run_labels: dict[str, str], run_prefix: str,
              timeout: float = SYNC_TIMEOUT) -> WatchedRun | None:
        """Both watches started and their first lists in; None (and both stopped) when the
        server refuses a list (401/403: at once) or one does not arrive within ``timeout`` s."""
        watched = cls(api, run_labels, run_prefix)
        reflectors = (watched.pods, watched.claims)
        for reflector in reflectors:
            reflector.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(r.wait_synced(0.1) for r in reflectors):
                return watched
            if any(r.refused_with in (401, 403) for r in reflectors):
                break  # not allowed to: polling is the answer, at once
        watched.stop()
        log.warning("could not list and watch pods and resourceclaims (%s); the waits poll instead",
                    ", ".join(f"{r.name}: {r.refused_with or 'not listed in time'}" for r in reflectors))
        return None

    def stop(self) -> None:
        for reflector in (self.pods, self.claims):
            reflector.stop()

    # --- what the waits read --------------------------------------------------------------------
    def pod(self, namespace: str, name: str) -> Pod | None:
        obj = self.pods.get(namespace, name)
        return Pod(obj) if obj is not None else None

    def claim(self, namespace: str, name: str) -> Claim | None:
        obj = self.claims.get(namespace, name)
        return Claim(obj) if obj is not None else None

    def claims_in(self, namespace: str) -> list[Claim]:
        return [Claim(o) for o in self.claims.items() if o["metadata"].get("namespace") == namespace]

    def held_outside_run(self) -> dict[str, str]:
        """Device key -> ``namespace/claim`` of every allocated claim outside this run's
        namespaces (as :func:`draconf.sweep.held_by_others` reads from the API server)."""
        return held_devices(map(Claim, self.claims.items()),
                            lambda claim: not claim.namespace.startswith(self.run_prefix))

    def held_in_run(self, keys: set[str], but: str) -> dict[str, str]:
        """Which of ``keys`` a claim in another namespace of this run (not ``but``) holds:
        key -> ``namespace/claim`` (as :func:`draconf.workload.taken_by_run`)."""
        return held_devices(map(Claim, self.claims.items()),
                            lambda claim: claim.namespace.startswith(self.run_prefix) and claim.namespace != but, keys)
