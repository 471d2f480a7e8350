"""draconf as a user installs it: no checkout beside the package.

The sdist and the wheel built from it (what ``python -m build``, tox and pipx make; ``pip
install .`` builds the same wheel) are installed into a fresh venv, which then runs the suites,
manifests and RBAC file it carries (draconf/bundle.py), never the checkout's.  The venv sees the
system's site-packages for draconf's dependencies (no download of them), so the test checks
that every path it uses is the venv's own.  About 20 s, most of it the two builds; a preflight
run on the shared bed is the one test that needs a bed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installed:
    venv: Path
    sdist: Path
    wheel: Path
    work: Path

    def run(self, program: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """``program`` of the venv, from a directory that is not the checkout, with nothing on
        PYTHONPATH, so only the installed package can be imported."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        return subprocess.run([str(self.venv / "bin" / program), *args], capture_output=True,
                              text=True, cwd=self.work, env=env, timeout=timeout)


def _sources(into: Path) -> None:
    """The checkout's files as a build from a clone sees them (tracked and new, not ignored),
    copied, so the build's own files (build/, *.egg-info) stay out of the checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def _run(*cmd, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    work = tmp_path_factory.mktemp("installed-package")
    src, dist, tools, venv = work / "src", work / "dist", work / "tools", work / "venv"
    _sources(src)
    # python -m build: the sdist, then the wheel from that sdist, each in an isolated build env
    # (setuptools as pyproject.toml's build-system asks); only this scratch venv gets `build`.
    _run(sys.executable, "-m", "venv", tools)
    _run(tools / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "build>=1")
    _run(tools / "bin" / "python", "-m", "build", "--outdir", dist, src)
    sdist, = dist.glob("draconf-*.tar.gz")
    wheel, = dist.glob("draconf-*.whl")
    _run(sys.executable, "-m", "venv", "--system-site-packages", venv)
    _run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel)
    return Installed(venv, sdist, wheel, work / "cwd")


@pytest.fixture(autouse=True)
def _cwd(installed):
    """The venv's commands run where a checkout's suite file of the same name would be in the
    way (tox runs them in the checkout): a run must take the package's, never this one."""
    (installed.work / "suites").mkdir(parents=True, exist_ok=True)
    (installed.work / "suites" / "test_preflight.py").write_text(
        "def test_the_copy_beside_the_package():\n    raise AssertionError('ran suites/ of the working directory')\n")


def _checkout_files(top: str) -> set[str]:
    return {p.relative_to(REPO).as_posix() for p in (REPO / top).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_sdist_and_the_wheel_carry_every_suite_and_manifest(installed):
    bundled = _checkout_files("suites") | _checkout_files("manifests")
    assert "manifests/rbac/clusterrole.yaml" in bundled and "suites/test_preflight.py" in bundled
    with tarfile.open(installed.sdist) as sdist:
        top = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert bundled <= top, f"missing from the sdist: {sorted(bundled - top)}"
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    packaged = {f"draconf/_bundle/{name}" for name in bundled}
    assert packaged <= names, f"missing from the wheel: {sorted(packaged - names)}"


def test_the_installed_draconf_finds_them_inside_its_package(installed):
    shown = installed.run("python", "-c", "import json, draconf, draconf.cli as c, draconf.manifests as m, "
                          "draconf.permissions as p; print(json.dumps({'package': draconf.__file__, "
                          "'suites': str(c.SUITES_DIR), 'manifests': str(m.MANIFEST_DIR), "
                          "'clusterrole': str(p.CLUSTERROLE_FILE), 'needed': len(p.needed()), "
                          "'loaded': len(m.load('01-single-gpu.yaml'))}))")
    assert shown.returncode == 0, shown.stderr
    paths = json.loads(shown.stdout)
    package = Path(paths["package"]).parent
    assert package.is_relative_to(installed.venv), paths  # not the system's editable install
    assert Path(paths["suites"]) == package / "_bundle" / "suites"
    assert Path(paths["manifests"]) == package / "_bundle" / "manifests"
    assert Path(paths["clusterrole"]) == package / "_bundle" / "manifests" / "rbac" / "clusterrole.yaml"
    assert paths["needed"] > 0 and paths["loaded"] == 2

    help_ = installed.run("draconf", "run", "--help")
    assert help_.returncode == 0 and help_.stdout.startswith("usage: draconf run"), help_.stderr

    # pytest collects the packaged suites under the same node ids as the checkout's.
    root = package / "_bundle"
    collected = installed.run("python", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              "--import-mode=importlib", f"--rootdir={root}", str(root / "suites"))
    assert collected.returncode == 0, collected.stdout + collected.stderr
    ids = [line for line in collected.stdout.splitlines() if "::" in line]
    assert ids and all(i.startswith("suites/") for i in ids), ids[:5]
    assert "suites/test_preflight.py::test_preflight[permissions]" in ids


def test_a_preflight_from_the_installed_package_on_the_bed(installed, healthy_bed):
    reports = installed.work / "reports"
    run = installed.run("draconf", "run", "--target", "testbed", "--testbed-name", healthy_bed.name,
                        "--reports", str(reports), "suites/test_preflight.py")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert f"rootdir: {installed.venv}" in out  # the packaged suites ran, not the checkout's
    assert "PytestAssertRewriteWarning" not in out  # draconf/__init__.py says why
    rows = json.loads((reports / "summary.json").read_text())["tests"]
    assert rows and all(r["id"].startswith("suites/test_preflight.py::") for r in rows), rows
    assert {r["outcome"] for r in rows} <= {"passed", "skipped"}, rows
    assert any(r["id"].endswith("[permissions]") and r["outcome"] == "passed" for r in rows), rows
