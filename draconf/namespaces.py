"""Namespaces the suite creates: one per test, named and labelled with the run id.

Everything a test creates lives in its namespace, so deleting the namespace is the cleanup,
and ``sweep`` can find what a killed run left behind by label, touching nothing else.

>>> run = RunId("k3x9q2")
>>> name = run.namespace_name("test_allocation[single-gpu]")
>>> name.startswith("draconf-k3x9q2-test-allocation-single-gpu-"), len(name) <= 63
(True, True)
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from draconf import waits
from draconf.kube import label_selector, raw_items
from draconf.errors import DraconfError
from draconf.pods import delete_pods

log = logging.getLogger("draconf.namespaces")

MANAGED_BY = {"app.kubernetes.io/managed-by": "draconf"}
RUN_ID_LABEL = "draconf.dev/run-id"


@dataclass(frozen=True)
class RunId:
    value: str

    @classmethod
    def for_this_run(cls) -> "RunId":
        """Shared by every pytest-xdist worker of one run; random otherwise."""
        shared = os.environ.get("DRACONF_RUN_ID") or os.environ.get("PYTEST_XDIST_TESTRUNUID")
        return cls((shared or secrets.token_hex(4))[:8].lower())

    @property
    def labels(self) -> dict[str, str]:
        return {**MANAGED_BY, RUN_ID_LABEL: self.value}

    def namespace_name(self, test_name: str) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")
        prefix = f"draconf-{self.value}-"
        suffix = "-" + secrets.token_hex(2)
        return prefix + slug[: 63 - len(prefix) - len(suffix)].rstrip("-") + suffix

    def __str__(self) -> str:
        return self.value


class NamespaceRegistry:
    """Namespaces created in this process and not yet deleted (for Ctrl-C / SIGTERM cleanup)."""

    def __init__(self):
        self._names: set[str] = set()
        self._deleting: set[str] = set()
        self._lock = threading.Lock()

    def add(self, name: str) -> None:
        with self._lock:
            self._names.add(name)

    def discard(self, name: str) -> None:
        with self._lock:
            self._names.discard(name)

    def pending(self) -> list[str]:
        with self._lock:
            return sorted(self._names)

    def deleting(self, name: str) -> None:
        """``name`` was deleted without waiting for it to go: the session waits once, at its end."""
        with self._lock:
            self._names.discard(name)
            self._deleting.add(name)

    def still_deleting(self) -> list[str]:
        with self._lock:
            return sorted(self._deleting)

    def gone(self, names) -> None:
        with self._lock:
            self._deleting.difference_update(names)


REGISTRY = NamespaceRegistry()


def create(api, run: RunId, test_name: str, extra_labels: dict | None = None,
           sa_timeout: float = 30) -> str:
    """Create the namespace and wait for its ``default`` ServiceAccount; none within
    ``sa_timeout`` seconds means kube-controller-manager is not acting
    (:class:`~draconf.waits.ControlPlaneStalled`, ``controller-manager-unavailable``)."""
    name = run.namespace_name(test_name)
    body = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**run.labels, **(extra_labels or {})}}}
    waits.call(api.core.create_namespace, body)
    REGISTRY.add(name)
    # Pods are rejected until the service account controller has made `default`.
    try:
        waits.wait_until(f"service account default in {name}",
                         lambda: _has_default_sa(api, name), bool, timeout=sa_timeout, interval=1.0)
    except waits.WaitTimeout as err:
        from draconf.controlplane import health
        raise waits.ControlPlaneStalled(
            "controller-manager-unavailable",
            f"no ServiceAccount default was created in namespace "
            f"{name} in {sa_timeout:g}s: the serviceaccount controller of kube-controller-manager "
            f"did not act; kube-controller-manager: {health(api, 'kube-controller-manager')}",
            err.last_observed) from None
    return name


def _has_default_sa(api, namespace: str) -> bool:
    try:
        api.core.read_namespaced_service_account("default", namespace)
        return True
    except ApiException as err:
        if err.status == 404:
            return False
        raise


def delete(api, name: str, wait: float = 0) -> None:
    """Delete a namespace (idempotent); with ``wait`` > 0, until it is gone.

    Its pods go first, with the suite's stated grace period: the namespace controller would
    give each its own (30 s by default)."""
    try:
        waits.call(delete_pods, api, name)
        waits.call(api.core.delete_namespace, name)
    except ApiException as err:
        if err.status != 404:
            raise
    REGISTRY.discard(name)
    if wait > 0:
        _waiting_out_stuck(api, [name], lambda seconds: waits.wait_until(
            f"namespace {name} to be deleted", lambda: _exists(api, name), lambda exists: not exists,
            timeout=seconds, interval=0.25, describe=lambda exists: "still terminating" if exists else "gone"),
            wait)


#: Namespaces deleted at once by :func:`delete_all` (each is a few requests, mostly waiting).
DELETE_AT_ONCE = 16


def delete_all(api, names: list[str], log_fn=log.info) -> dict[str, Exception]:
    """Delete ``names`` (as :func:`delete`, without waiting), :data:`DELETE_AT_ONCE` at a time:
    a fleet sweep interrupted at 1,000 nodes leaves 1,000, and one after another took minutes
    with nothing printed.  Returns the namespaces that could not be deleted, with why."""
    if len(names) > DELETE_AT_ONCE:
        log_fn(f"deleting {len(names)} namespace(s) of this run, {DELETE_AT_ONCE} at a time")
    failed: dict[str, Exception] = {}

    def one(name: str) -> None:
        try:
            delete(api, name)
            REGISTRY.deleting(name)
        except Exception as err:  # noqa: BLE001 - reported by the caller, never masking the run's outcome
            failed[name] = err

    with ThreadPoolExecutor(max_workers=DELETE_AT_ONCE, thread_name_prefix="delete-ns") as pool:
        list(pool.map(one, names))
    return failed


def _waiting_out_stuck(api, names: list[str], wait, timeout: float) -> None:
    """``wait(seconds)`` (which raises WaitTimeout); once :data:`RELEASE_STUCK_CLAIMS_AFTER`
    seconds have passed, the stuck pods and claims of ``names`` are released and it waits the
    rest of ``timeout``."""
    try:
        wait(min(timeout, RELEASE_STUCK_CLAIMS_AFTER))
        return
    except waits.WaitTimeout:
        if timeout <= RELEASE_STUCK_CLAIMS_AFTER:
            raise
    for name in names:
        force_delete_stuck_pods(api, name)
        release_stuck_claims(api, name)
    wait(timeout - RELEASE_STUCK_CLAIMS_AFTER)


def delete_releasing_devices(api, name: str, timeout: float = 120) -> None:
    """Delete a namespace and wait only until its claims hold no device (its pods gone, the
    generated claims deleted, named ones deallocated): what the next test needs.  The
    namespace itself goes in the background (the namespace controller waits about 5 s before
    it acts); :func:`wait_deleted` waits for all of them once, at the end of the session.

    Claims a node never finishes unpreparing are released after
    :data:`RELEASE_STUCK_CLAIMS_AFTER` seconds, as :func:`delete` does."""
    delete(api, name)
    REGISTRY.deleting(name)

    def holding() -> list[str]:
        try:
            claims = api.resource.list_namespaced_resource_claim(name).items
        except ApiException as err:
            if err.status == 404:
                return []
            raise
        return [c.metadata.name for c in claims
                if c.status and (c.status.allocation or c.status.reserved_for)]

    _waiting_out_stuck(api, [name], lambda seconds: waits.wait_until(
        f"the claims of namespace {name} to release their devices", holding, lambda held: not held,
        timeout=seconds, interval=0.25, describe=lambda held: f"still allocated: {', '.join(held)}"),
        timeout)


def wait_deleted(api, names: list[str], timeout: float = 120, log_fn=log.info) -> list[str]:
    """Wait until ``names`` (namespaces being deleted) are gone, releasing stuck pods and claims
    after :data:`RELEASE_STUCK_CLAIMS_AFTER` seconds; returns those still there at ``timeout``."""
    def remaining() -> list[str]:
        return _existing(api, names)

    try:
        _waiting_out_stuck(api, names, lambda seconds: waits.wait_until(
            f"{len(names)} namespace(s) of this run to be deleted", remaining, lambda left: not left,
            timeout=seconds, interval=0.5, describe=lambda left: f"still there: {few(left)}",
            progress=log_fn), timeout)
        left = []
    except waits.WaitTimeout:
        left = remaining()
    REGISTRY.gone(set(names) - set(left))
    return left


#: Seconds a namespace of ours may stay Terminating before we release claims a driver holds.
RELEASE_STUCK_CLAIMS_AFTER = 20.0


def force_delete_stuck_pods(api, namespace: str) -> list[str]:
    """Force-delete this run's pods that a node never finishes deleting (``kubectl delete --force``).

    Only ever called on a namespace draconf created and is deleting.  A kubelet that cannot
    unprepare a pod's claims keeps the pod Terminating for ever; the failure itself has been
    reported by the cleanup check, and the suite must not leave the namespace behind.
    """
    stuck = [p.metadata.name for p in api.core.list_namespaced_pod(namespace).items
             if p.metadata.deletion_timestamp]
    for name in stuck:
        log.warning("namespace %s: force-deleting pod %s, which its node did not finish deleting",
                    namespace, name)
        delete_pods(api, namespace, name, grace_period_seconds=0)
    return stuck


def release_stuck_claims(api, namespace: str) -> list[str]:
    """Remove the finalizers that keep this run's own, already deleted claims alive.

    Only ever called on a namespace draconf created and is deleting: a driver that never
    finishes unpreparing must not leave the suite's namespaces Terminating forever.  The
    failure itself has been reported by the cleanup check.
    """
    released = []
    for claim in api.resource.list_namespaced_resource_claim(namespace).items:
        finalizers = claim.metadata.finalizers or []
        # Kubernetes' own finalizer goes once the controller has deallocated; only a claim no pod
        # reserves any more, held by someone else's finalizer, is released here.
        foreign = [f for f in finalizers if not f.startswith("resource.kubernetes.io/")]
        reserved = claim.status.reserved_for if claim.status else None
        if claim.metadata.deletion_timestamp and foreign and not reserved:
            log.warning("namespace %s: removing finalizers %s from deleted claim %s so the "
                        "namespace can go", namespace, foreign, claim.metadata.name)
            # A JSON patch: a strategic merge patch *merges* the finalizers list and keeps
            # them all; the test op makes it fail rather than clobber a concurrent change.
            api.resource.patch_namespaced_resource_claim(claim.metadata.name, namespace, [
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": claim.metadata.resource_version},
                {"op": "replace", "path": "/metadata/finalizers",
                 "value": [f for f in finalizers if f not in foreign]}])
            released.append(claim.metadata.name)
    return released


def few(names: list[str], shown: int = 5) -> str:
    """The first ``shown`` names and how many more: a progress line, not a thousand names.

    >>> few(["a", "b"]), few([f"n{i}" for i in range(800)], shown=2)
    ('a, b', 'n0, n1 and 798 more')
    """
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _existing(api, names: list[str]) -> list[str]:
    """Which of ``names`` (namespaces draconf made) still exist: one list of draconf's
    namespaces, not a read of each (a fleet sweep deletes 800)."""
    if len(names) <= 3:
        return [n for n in names if _exists(api, n)]
    there = {n["metadata"]["name"] for n in raw_items(api.core.list_namespace, label_selector=label_selector(MANAGED_BY))}
    return [n for n in names if n in there]


def _exists(api, name: str) -> bool:
    try:
        api.core.read_namespace(name)
        return True
    except ApiException as err:
        if err.status == 404:
            return False
        raise


def leftovers(api, run: RunId | None = None) -> list[str]:
    selector = label_selector(run.labels if run else MANAGED_BY)
    return sorted(n.metadata.name for n in api.core.list_namespace(label_selector=selector).items)


def sweep(api, run: RunId | None = None, wait: float = 120, log_fn=print) -> list[str]:
    """Delete every namespace draconf created (optionally of one run) and wait until they are
    gone; returns their names.  Raises :class:`DraconfError` naming the ones still there when
    ``wait`` runs out (a sweep that says "removed" has removed)."""
    names = leftovers(api, run)
    for name in names:
        log_fn(f"deleting namespace {name}")
        delete(api, name)
    if not names:
        return names

    def remaining() -> list[str]:
        return _existing(api, names)

    try:
        waits.wait_until(f"{len(names)} namespace(s) to be deleted", remaining, lambda left: not left,
                         timeout=wait, describe=lambda left: f"still there: {few(left)}",
                         progress=log_fn)
    except waits.WaitTimeout as err:
        raise DraconfError(f"deleted {len(names)} namespace(s), but after {wait:g}s "
                           f"{err.last_observed} (see `kubectl get ns` and their pods and "
                           "ResourceClaims; run `draconf sweep` again once they are gone)") from None
    return names
