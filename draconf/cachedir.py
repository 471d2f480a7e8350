"""Where draconf keeps what it builds or installs once and reuses: ``$DRACONF_CACHE_DIR``, else
``$XDG_CACHE_HOME/draconf`` (``~/.cache/draconf``).  The test bed's binaries and images and the
HTML report's pinned Allure both live under it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("DRACONF_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "draconf")
    return Path(base)
