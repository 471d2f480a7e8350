"""What a run keeps in pytest's stash for the code that acts after a test: the API connection
the ``cluster`` fixture made and the run's driver profile.

Below the plugin and the diagnosis alike: the plugin (``draconf.pytest_plugin``) sets them, the
diagnosis of a failed test (``draconf.diagnosis.diagnose_item``) and the suites' collection
hooks read them, and neither imports the other for it.
"""

from __future__ import annotations

import pytest

from draconf.profile import Profile

#: The API connection the ``cluster`` fixture made, for the hooks that read the cluster after a
#: test (the diagnosis of a failure, the session's namespace sweep); absent until it ran.
CLUSTER_API = pytest.StashKey[object]()
#: Set on a failed test and on every collector above it (class, module, session), so a
#: namespace of any scope knows whether a test inside that scope failed.
FAILED = pytest.StashKey[bool]()
#: The driver profile of the run (``--profile`` for ``--target``), resolved at configure time.
PROFILE = pytest.StashKey[Profile]()


def cluster_api(config):
    """The run's API connection once the ``cluster`` fixture made it, else None."""
    return config.stash.get(CLUSTER_API, None)


def run_profile(config):
    """The run's driver profile (None before pytest_configure resolved it)."""
    return config.stash.get(PROFILE, None)
