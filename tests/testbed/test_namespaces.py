"""Namespace cleanup never leaves a suite namespace Terminating, even when a driver holds claims."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from draconf import namespaces


def test_deleting_a_namespace_releases_claims_a_driver_never_lets_go(api):
    run = namespaces.RunId("nstest")
    name = namespaces.create(api, run, "stuck-claim")
    api.resource.create_namespaced_resource_claim(name, {
        "metadata": {"name": "held", "finalizers": ["example.com/never-unprepared"]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
    # delete() returns once the namespace is gone (a wait that never ends raises WaitTimeout):
    # the suite released the claim the driver never lets go, and nothing of it is left.
    namespaces.delete(api, name, wait=60)
    assert name not in namespaces.leftovers(api)
    with pytest.raises(ApiException) as gone:
        api.resource.read_namespaced_resource_claim("held", name)
    assert gone.value.status == 404


def test_a_sweep_that_cannot_finish_says_what_is_left(api):
    """A namespace held by someone else's finalizer: the sweep names it instead of reporting it
    removed; once released, a second sweep finishes."""
    from draconf.errors import DraconfError

    run = namespaces.RunId("sweephold")
    name = namespaces.create(api, run, "held")
    api.core.create_namespaced_config_map(name, {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})
    try:
        with pytest.raises(DraconfError, match=f"after 3s still there: {name}"):
            namespaces.sweep(api, run, wait=3, log_fn=lambda _: None)
        assert namespaces.leftovers(api, run) == [name]
    finally:
        api.core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})
    assert namespaces.sweep(api, run, log_fn=lambda _: None) == [name]
    assert namespaces.leftovers(api, run) == []
