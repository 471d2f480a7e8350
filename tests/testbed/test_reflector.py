"""draconf.reflector against a real API server: the store follows creates, updates and deletes,
says so through its ``changed`` event, and lists again when the server no longer holds the
version its watch would resume from (410 Expired)."""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.request
from types import SimpleNamespace

from draconf import namespaces
from draconf.kube import connect
from draconf.profile import TESTBED_IMAGE
from draconf.reflector import Reflector
from draconf.watched import WatchedRun


def until(reflector: Reflector, what: str, done) -> list[dict]:
    items = reflector.wait_until(done, timeout=10)
    assert items is not None, f"the store never showed {what} in 10 s: {reflector.items()}"
    return items


def data_of(items: list[dict]) -> dict[str, dict]:
    return {cm["metadata"]["name"]: cm.get("data") or {} for cm in items}


def test_the_store_follows_creates_updates_and_deletes(api, ns):
    api.core.create_namespaced_config_map(ns, {"metadata": {"name": "before"}, "data": {"k": "0"}})
    changed = threading.Event()
    maps = Reflector(api.core.list_namespaced_config_map, "configmaps", changed, namespace=ns).start()
    try:
        assert maps.wait_synced(10), "the first list never arrived"
        assert "before" in data_of(maps.items()), "what existed before the watch is not listed"
        assert changed.is_set(), "the first list did not set the changed event"

        api.core.create_namespaced_config_map(ns, {"metadata": {"name": "after"}, "data": {"k": "1"}})
        until(maps, "the created ConfigMap", lambda items: "after" in data_of(items))
        api.core.patch_namespaced_config_map("after", ns, {"data": {"k": "2"}})
        until(maps, "the update", lambda items: data_of(items).get("after") == {"k": "2"})
        api.core.delete_namespaced_config_map("before", ns)
        items = until(maps, "the deletion", lambda items: "before" not in data_of(items))
        assert all(isinstance(item, dict) and item["metadata"]["namespace"] == ns for item in items), (
            "the store holds the API server's objects as dicts, of the listed namespace only")
    finally:
        maps.stop()


def test_changes_are_handed_out_once_by_name(api, ns):
    """take_changes(): None after a list (anything may have changed), then the (namespace, name)
    of each object created, updated or deleted since the last call, each once; get() reads the
    store by name."""
    api.core.create_namespaced_config_map(ns, {"metadata": {"name": "before"}, "data": {"k": "0"}})
    maps = Reflector(api.core.list_namespaced_config_map, "configmaps", namespace=ns).start()
    try:
        assert maps.wait_synced(10), "the first list never arrived"
        assert maps.take_changes() is None, "after a list, anything may have changed"
        assert maps.take_changes() == set(), "a change was handed out twice"
        assert maps.get(ns, "before")["data"] == {"k": "0"}

        api.core.create_namespaced_config_map(ns, {"metadata": {"name": "after"}, "data": {"k": "1"}})
        api.core.patch_namespaced_config_map("before", ns, {"data": {"k": "2"}})
        until(maps, "the update", lambda items: data_of(items).get("before") == {"k": "2"})
        assert maps.take_changes() == {(ns, "after"), (ns, "before")}
        api.core.delete_namespaced_config_map("after", ns)
        until(maps, "the deletion", lambda items: "after" not in data_of(items))
        assert maps.take_changes() == {(ns, "after")}
        assert maps.get(ns, "after") is None
    finally:
        maps.stop()


def _compact_etcd(bed) -> None:
    """Compact the bed's etcd up to now, as kube-apiserver does every 5 minutes (through etcd's
    own HTTP gateway; on a KWOK-only bed etcd listens on the host's loopback)."""
    url = f"http://127.0.0.1:{bed.state()['ports']['etcd-client']}"

    def call(path: str, body: dict) -> dict:
        request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    revision = call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
    call("/v3/kv/compaction", {"revision": revision, "physical": True})


def test_a_version_the_api_server_no_longer_holds_is_listed_again(kwok_gpu_bed, caplog):
    """A watch from a version etcd has compacted away gets 410 Expired (an ERROR event in the
    stream).  Events are watched here: kube-apiserver keeps no watch cache for them, so the
    watch goes to etcd.  The first list reports version "1", as a reflector that was away
    too long would resume from; the store must list again, at once and without a warning,
    then follow changes as before."""
    api = connect(kwok_gpu_bed.kubeconfig)
    ns = namespaces.create(api, namespaces.RunId("selftest"), "reflector-410")
    lists = []

    def event(name: str) -> dict:
        return {"metadata": {"name": name}, "involvedObject": {"kind": "ConfigMap", "namespace": ns, "name": "selftest"},
                "reason": "Selftest", "message": name, "type": "Normal"}

    def list_events(*args, **kwargs):
        response = api.core.list_namespaced_event(*args, **kwargs)
        if kwargs.get("watch"):
            return response
        lists.append(kwargs)
        if len(lists) > 1:
            return response
        listed = json.loads(response.data)
        listed["metadata"]["resourceVersion"] = "1"
        return SimpleNamespace(data=json.dumps(listed).encode())

    api.core.create_namespaced_event(ns, event("before"))
    _compact_etcd(kwok_gpu_bed)
    events = Reflector(list_events, "events", namespace=ns).start()
    try:
        assert events.wait_synced(10)
        api.core.create_namespaced_event(ns, event("after"))
        until(events, "the event created after the 410", lambda items: {"before", "after"} <= {e["metadata"]["name"] for e in items})
        assert len(lists) == 2, f"expected one list, a 410 and a second list; lists: {len(lists)}"
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    finally:
        events.stop()
        namespaces.delete(api, ns, wait=60)


def test_the_sweeps_view_follows_the_runs_pods_and_every_claim(healthy_bed, api, ns):
    """draconf.watched.WatchedRun, as the fleet sweep starts it: the run's pods (by its run-id
    label) and the claims of every namespace, as the waits read them; a claim outside the run's
    namespaces is someone else's."""
    run = namespaces.RunId("selftest")
    view = WatchedRun.start(api, run.labels, f"draconf-{run}-", timeout=10)
    assert view is not None, "the view never synced with the bed's admin credentials"
    try:
        claim = {"metadata": {"name": "watched"}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
        api.resource.create_namespaced_resource_claim(ns, claim)
        pod = {"metadata": {"name": "watched", "labels": run.labels},
               "spec": {"containers": [{"name": "c", "image": TESTBED_IMAGE, "command": ["sleep", "1"]}],
                        "nodeSelector": {"draconf.dev/nowhere": "true"}}}  # stays Pending: nothing to run
        api.core.create_namespaced_pod(ns, pod)
        assert until(view.pods, "the run's pod", lambda items: view.pod(ns, "watched") is not None)
        assert until(view.claims, "the claim", lambda items: [c.name for c in view.claims_in(ns)] == ["watched"])
        assert view.held_in_run({"gpu.nvidia.com/x/gpu-0"}, but="elsewhere") == {}, "an unallocated claim holds nothing"
    finally:
        view.stop()


def test_credentials_that_may_not_watch_get_no_view_at_once(healthy_bed):
    """The bed's user draconf-suite, bound to nothing: the server refuses the watches' lists,
    and the sweep is told at once to poll, not after the sync timeout."""
    started = time.monotonic()
    view = WatchedRun.start(connect(healthy_bed.dir / "draconf-suite.kubeconfig"), {"a": "b"}, "draconf-x-",
                            timeout=30)
    assert view is None, "a view was made with credentials that may not list pods or claims"
    assert time.monotonic() - started < 10, "a refused watch waited for the sync timeout"
