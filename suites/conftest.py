"""Labels every conformance test with its workload and check, for the reports and xdist."""

import pytest

CHECK_OF_TEST = {"test_allocation": "allocation", "test_cdi_injection": "cdi-injection",
                 "test_cleanup": "cleanup"}


def pytest_collection_modifyitems(items):
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
