"""Labels every conformance test with its workload and check, for the reports and xdist."""

import pytest

CHECK_OF_TEST = {"test_allocation": "allocation", "test_cdi_injection": "cdi-injection",
                 "test_cleanup": "cleanup"}


#: Run order: read-only checks first, then the workloads, then quota and failure scenarios.
MODULE_ORDER = ["test_preflight", "test_audit", "test_workloads", "test_quota", "test_failure_modes"]


def _rank(item) -> int:
    name = item.module.__name__.rsplit(".", 1)[-1] if getattr(item, "module", None) else ""
    return MODULE_ORDER.index(name) if name in MODULE_ORDER else len(MODULE_ORDER)


def pytest_collection_modifyitems(items):
    items.sort(key=_rank)  # stable: keeps pytest's order within a module
    for item in items:
        callspec = getattr(item, "callspec", None)
        workload = callspec.params.get("deployed") if callspec else None
        check = CHECK_OF_TEST.get(item.originalname)
        if workload and check:
            item.add_marker(pytest.mark.draconf(workload=workload, check=check))
            # Allure groups by feature (the workload) and story (the check).
            item.add_marker(pytest.mark.allure_label(workload, label_type="feature"))
            item.add_marker(pytest.mark.allure_label(check, label_type="story"))
            # A workload's checks share one deployment: keep them on one xdist worker.
            item.add_marker(pytest.mark.xdist_group(workload))
