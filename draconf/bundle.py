"""Where the suites and manifests are: inside the installed package, or beside it in a checkout.

The repository keeps ``suites/`` (pytest's test modules), ``manifests/`` (the YAML they apply,
which users also ``kubectl apply`` by hand) and ``manifests/rbac/clusterrole.yaml`` at its top.
A built package (a wheel, ``pip install .``, pipx, tox's sdist install, the container image)
carries them as ``draconf/_bundle/suites`` and ``draconf/_bundle/manifests`` (``setup.py``
copies them there when it builds the package); a checkout, and the editable install that
points into one, has them beside ``draconf/``.  Either way the two sit side by side under one
:data:`ROOT`, so pytest's node ids (``suites/test_workloads.py::...``, rootdir ``ROOT``) and
the report's rows are the same whichever way draconf was installed.

>>> (SUITES / "test_preflight.py").is_file(), (MANIFESTS / "01-single-gpu.yaml").is_file()
(True, True)
>>> CLUSTERROLE.relative_to(ROOT).as_posix()
'manifests/rbac/clusterrole.yaml'
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

#: The directory inside the package that a build fills (``setup.py``).
PACKAGED = "_bundle"


def package_dir() -> Path:
    """The ``draconf`` package's directory, as importlib.resources finds it.  pytest collects
    the suites from files, so an install whose package is not a directory (a zip) has none."""
    return Path(str(files("draconf")))


def find_root(package: Path) -> Path:
    """The directory holding ``suites/`` and ``manifests/`` for the package at ``package``:
    its packaged copy if it has one, else the checkout it sits in; else where the packaged
    copy should be, which is what an error names.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     checkout = Path(tmp)
    ...     (checkout / "draconf").mkdir(); (checkout / "suites").mkdir()
    ...     print(find_root(checkout / "draconf") == checkout)
    ...     (checkout / "draconf" / PACKAGED / "suites").mkdir(parents=True)
    ...     print(find_root(checkout / "draconf") == checkout / "draconf" / PACKAGED)
    True
    True
    """
    installed = package / PACKAGED
    if (installed / "suites").is_dir():
        return installed
    if (package.parent / "suites").is_dir():
        return package.parent
    return installed


#: ``suites/`` and ``manifests/`` are under this directory.
ROOT = find_root(package_dir())
SUITES = ROOT / "suites"
MANIFESTS = ROOT / "manifests"
#: What the suite's identity needs (draconf.permissions), and what a user binds it to.
CLUSTERROLE = MANIFESTS / "rbac" / "clusterrole.yaml"
