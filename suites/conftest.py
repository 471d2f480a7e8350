"""Labels every conformance test with its workload and check, for the reports and xdist."""

from pathlib import Path

import pytest

CHECK_OF_TEST = {"test_allocation": "allocation", "test_cdi_injection": "cdi-injection",
                 "test_cleanup": "cleanup", "test_sharing": "sharing"}


#: Run order: read-only checks first, then the workloads, then quota and failure scenarios.
MODULE_ORDER = ["test_preflight", "test_audit", "test_workloads", "test_jobs", "test_quota", "test_failure_modes"]


SUITES = Path(__file__).parent


def _rank(item) -> int:
    """Position of the item's suite module; items outside suites/ keep their place in front."""
    if item.path.parent != SUITES:
        return -1
    return MODULE_ORDER.index(item.path.stem) if item.path.stem in MODULE_ORDER else len(MODULE_ORDER)


def pytest_collection_modifyitems(items):
    items.sort(key=_rank)  # stable: keeps pytest's order within a module
    for item in items:
        callspec = getattr(item, "callspec", None)
        workload = callspec.params.get("started") if callspec else None
        check = CHECK_OF_TEST.get(getattr(item, "originalname", None))
        if workload and check:
            item.add_marker(pytest.mark.draconf(workload=workload, check=check))
            # Allure groups by feature (the workload) and story (the check).
            item.add_marker(pytest.mark.allure_label(workload, label_type="feature"))
            item.add_marker(pytest.mark.allure_label(check, label_type="story"))
            # A workload's checks share one deployment: keep them on one xdist worker.
            item.add_marker(pytest.mark.xdist_group(workload))


@pytest.fixture(scope="class")
def published_devices(cluster, profile):
    """Every device of the profile's driver as published when a workload class starts; none
    at all fails the workload (preflight names the cause)."""
    from draconf.devices import PublishedDevices
    published = PublishedDevices.read(cluster, profile.driver)
    if not len(published):
        pytest.fail(f"no devices of driver {profile.driver} are published in any ResourceSlice")
    return published
