"""A local copy of every object of one kind, kept current by one list and then a watch.

client-go's reflector does this for every controller: instead of listing all pods again and
again (the API server encodes every pod on every list, which on a 2-core machine with 800 pods
costs more CPU than the work itself), it lists once and then follows the changes.  The Python
client has the watch (:class:`kubernetes.watch.Watch`) but no reflector; this is the small part
of one that the bed's simulated node side and the benchmarks need.

Objects are kept as the API server sends them, plain dicts in its camelCase: turning every
event into a client model costs about as much CPU as the API server spends sending it (and
turning even the few pods about to be prepared into models was a third of the KWOK agent's
CPU at 800 pods).

Usage::

    changed = threading.Event()
    pods = Reflector(api.core.list_pod_for_all_namespaces, "pods", changed).start()
    pods.wait_synced(timeout=30)
    while True:
        changed.wait(1.0)
        changed.clear()
        for pod in pods.items():
            ... pod["spec"].get("nodeName") ...

A consumer that acts on what changed, as a controller's work queue does, reads
:meth:`Reflector.take_changes` instead: the (namespace, name) keys since its last call, or None
after a list (then anything may have changed)::

    keys = pods.take_changes()
    for pod in (pods.items() if keys is None else filter(None, (pods.get(*key) for key in keys))):
        ...

The store may lag the API server by the time an event takes to arrive: read it as "what was
last heard", and act with calls that tolerate a 404 or 409.  A watch's list function must be
bound to an ApiClient that nothing calls ``kubernetes.stream.stream`` on: while an exec opens,
``stream`` turns every request of its ApiClient, from any thread, into a websocket.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from draconf.kube import raw

log = logging.getLogger(__name__)

#: How long one watch request lasts before it is renewed from the last resourceVersion.
WATCH_SECONDS = 240


def key_of(obj: dict) -> tuple[str, str]:
    """(namespace, name): the store's key, as client-go's MetaNamespaceKeyFunc ("" namespace
    for a cluster-scoped object)."""
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


class Reflector:
    """Objects listed by ``list_fn`` (a client ``list_*`` method), as dicts, keyed by
    (namespace, name)."""

    def __init__(self, list_fn: Callable, name: str, changed: threading.Event | None = None, **list_kwargs):
        self.list_fn = list_fn
        self.name = name
        self.list_kwargs = list_kwargs
        #: Set after every change to the store (and after each full list).
        self.changed = changed or threading.Event()
        self._store: dict[tuple[str, str], dict] = {}
        #: Keys changed since take_changes() last ran; None: listed anew since.
        self._changes: set[tuple[str, str]] | None = None
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopping = False
        #: the HTTP status of the last list or watch the server refused (None: none refused)
        self.refused_with: int | None = None
        self._thread = threading.Thread(target=self._run, name=f"reflector-{name}", daemon=True)

    def start(self) -> Reflector:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following; the thread ends with its current watch request (a daemon thread)."""
        self._stopping = True

    def wait_synced(self, timeout: float) -> bool:
        """True once the first list is in the store."""
        return self._synced.wait(timeout)

    def items(self) -> list[dict]:
        """A snapshot of the store (the dicts themselves: read them, never change them)."""
        with self._lock:
            return list(self._store.values())

    def get(self, namespace: str, name: str) -> dict | None:
        """The object last heard of under that name (read it, never change it), or None."""
        with self._lock:
            return self._store.get((namespace, name))

    def take_changes(self) -> set[tuple[str, str]] | None:
        """The keys of every object added, changed or deleted since the last call, or None if
        the store was listed anew since (the first call's answer): then anything may have
        changed.  For one consumer: each change is handed out once."""
        with self._lock:
            changes, self._changes = self._changes, set()
        return changes

    def wait_until(self, done: Callable[[list[dict]], bool], timeout: float) -> list[dict] | None:
        """The store's items once ``done(items)`` holds, checked at once and after every change;
        None if it still does not after ``timeout`` seconds.  (``changed`` is cleared here: a
        reflector waited on this way shares that event with no one.)"""
        deadline = time.monotonic() + timeout
        while True:
            self.changed.clear()  # before reading: a change after this read sets it again
            items = self.items()
            if done(items):
                return items
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.changed.wait(min(left, 1.0))

    def _list(self) -> str:
        listed = raw(self.list_fn, **self.list_kwargs)
        with self._lock:
            self._store = {key_of(o): o for o in listed["items"]}
            self._changes = None
        self._synced.set()
        self.changed.set()
        return listed["metadata"]["resourceVersion"]

    def _run(self) -> None:
        resource_version = None
        while not self._stopping:
            try:
                if resource_version is None:
                    resource_version = self._list()
                resource_version = self._follow(resource_version)  # None: list again
            except ApiException as err:
                if self._stopping:
                    return
                self.refused_with = err.status
                # 410 Gone: the API server no longer holds that version; list again.
                if err.status != 410:
                    log.warning("%s: watch failed (%s %s); listing again", self.name, err.status, err.reason)
                    time.sleep(1)
                resource_version = None
            except Exception as err:  # noqa: BLE001 - a dropped connection: list again, never give up
                if self._stopping:
                    return
                log.warning("%s: watch failed (%s); listing again", self.name, err)
                time.sleep(1)
                resource_version = None

    def _follow(self, resource_version: str) -> str | None:
        """Apply one watch request's events; the version to resume from, or None to list again."""
        # The type is never used with deserialize=False; naming one spares the client's guess,
        # which fails for resource.k8s.io/v1 (it looks for V1ResourceClaim).
        stream = watch.Watch(return_type=dict)
        events = stream.stream(self.list_fn, resource_version=resource_version, timeout_seconds=WATCH_SECONDS,
                               allow_watch_bookmarks=True, deserialize=False, **self.list_kwargs)
        try:
            for event in events:
                if self._stopping:
                    stream.stop()
                    break
                kind, obj = event["type"], event["object"]
                resource_version = obj["metadata"]["resourceVersion"]
                if kind == "BOOKMARK":
                    continue
                key = key_of(obj)
                with self._lock:
                    # One stream, in resourceVersion order: a name's deletion comes before
                    # its next object of that name.
                    if kind == "DELETED":
                        self._store.pop(key, None)
                    else:
                        self._store[key] = obj
                    if self._changes is not None:
                        self._changes.add(key)
                self.changed.set()
        except KeyError as err:
            # An ERROR event (410 Expired: the version is too old to resume from).  With
            # deserialize=False the client fails on it looking for the "raw_object" it only
            # adds when it deserializes (kubernetes 37.0.2's Watch.stream).
            if err.args != ("raw_object",):
                raise
            return None
        return resource_version
