"""The plugin's bookkeeping of failures: a namespace of any scope is kept (--keep-on-failure)
only when a test inside that very scope failed, not one in a scope whose id merely starts
the same way (TestA vs TestAB)."""

from __future__ import annotations

pytest_plugins = ["pytester"]

CONFTEST = """
pytest_plugins = ["draconf.pytest_plugin"]

import pytest
from draconf.pytest_plugin import FAILED

@pytest.fixture(scope="class")
def class_scope(request):
    yield
    print(f"\\nSCOPE {request.node.nodeid} failed={request.node.stash.get(FAILED, False)}")

@pytest.fixture(scope="module")
def module_scope(request):
    yield
    print(f"\\nSCOPE {request.node.nodeid} failed={request.node.stash.get(FAILED, False)}")
"""

TESTS = """
import pytest

@pytest.mark.usefixtures("module_scope", "class_scope")
class TestA:
    def test_ok(self):
        pass

@pytest.mark.usefixtures("module_scope", "class_scope")
class TestAB:
    def test_fails(self):
        assert False
"""


def test_a_failure_marks_exactly_its_own_scopes(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_scopes=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-s", "--draconf-reports=out")
    result.assert_outcomes(passed=1, failed=1)
    scopes = [line for line in result.outlines if line.startswith("SCOPE ")]
    assert scopes == ["SCOPE test_scopes.py::TestA failed=False",
                      "SCOPE test_scopes.py::TestAB failed=True",
                      "SCOPE test_scopes.py failed=True"]
