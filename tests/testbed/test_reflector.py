"""draconf.reflector against a real API server: the store follows creates, updates and deletes,
and says so through its ``changed`` event."""

from __future__ import annotations

import threading

from draconf.reflector import Reflector


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
