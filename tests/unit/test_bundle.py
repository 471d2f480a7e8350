"""Where draconf finds its suites, manifests and RBAC file (draconf/bundle.py), and what
`draconf run` makes of a suite path when the installed package and a checkout both have one.
The installed wheel itself is tests/testbed/test_installed_package.py."""

from __future__ import annotations

from pathlib import Path

from draconf import bundle, cli, manifests, permissions

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_uses_its_own_files_through_one_module():
    assert bundle.ROOT == REPO  # this run imports the checkout's draconf
    assert cli.SUITES_DIR == REPO / "suites"
    assert manifests.MANIFEST_DIR == REPO / "manifests"
    assert permissions.CLUSTERROLE_FILE == REPO / "manifests" / "rbac" / "clusterrole.yaml"


def test_a_built_package_prefers_its_packaged_copy(tmp_path):
    site = tmp_path / "site-packages"
    (site / "draconf" / bundle.PACKAGED / "suites").mkdir(parents=True)
    assert bundle.find_root(site / "draconf") == site / "draconf" / bundle.PACKAGED
    # neither: the packaged place, which the "suites directory ... is missing" error names
    assert bundle.find_root(tmp_path / "elsewhere" / "draconf") == tmp_path / "elsewhere" / "draconf" / bundle.PACKAGED


def test_a_suite_path_names_the_installed_suites_even_from_a_checkout(tmp_path, monkeypatch):
    """tox installs draconf from its sdist and runs `draconf run suites/test_jobs.py` in the
    checkout: the path must name the package's file, under the run's rootdir, not the
    checkout's copy beside it (node ids like `::test_x`, no `suites/`, no summary rows)."""
    installed = tmp_path / "venv" / "draconf" / bundle.PACKAGED
    (installed / "suites").mkdir(parents=True)
    (installed / "suites" / "test_jobs.py").write_text("")
    checkout = tmp_path / "checkout"
    (checkout / "suites").mkdir(parents=True)
    (checkout / "suites" / "test_jobs.py").write_text("")
    (checkout / "test_mine.py").write_text("")
    monkeypatch.setattr(cli, "SUITES_DIR", installed / "suites")
    monkeypatch.chdir(checkout)
    assert cli._from_checkout("suites/test_jobs.py::t") == f"{installed / 'suites' / 'test_jobs.py'}::t"
    assert cli._from_checkout("test_mine.py") == "test_mine.py"  # the user's own file, as given
