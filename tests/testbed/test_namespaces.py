"""Namespace cleanup never leaves a suite namespace Terminating, even when a driver holds claims."""

from __future__ import annotations

import time

from draconf import namespaces


def test_deleting_a_namespace_releases_claims_a_driver_never_lets_go(api):
    run = namespaces.RunId("nstest")
    name = namespaces.create(api, run, "stuck-claim")
    api.resource.create_namespaced_resource_claim(name, {
        "metadata": {"name": "held", "finalizers": ["example.com/never-unprepared"]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
    started = time.monotonic()
    namespaces.delete(api, name, wait=60)
    assert time.monotonic() - started < 60
    assert name not in namespaces.leftovers(api)
