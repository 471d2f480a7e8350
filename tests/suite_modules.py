"""The suite's modules for the project's own tests and harnesses.

``suites/`` is no package: pytest imports its files by path (``--import-mode=importlib`` names
them ``suites.<file>``).  Tests that reuse a suite's pure functions or declarations load the
same module under that name, so that pytest, collecting the suite later in the same session,
finds it there instead of importing it a second time."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SUITES = Path(__file__).resolve().parents[1] / "suites"


def suite_module(name: str):
    """``suites/<name>.py`` as a module, e.g. ``suite_module("test_workloads").WORKLOADS``."""
    qualified = f"suites.{name}"
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(qualified, SUITES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[qualified]
            raise
    return sys.modules[qualified]
