"""One build step pyproject.toml cannot declare: the suites and manifests go into the package.

``suites/`` and ``manifests/`` stay at the top of the repository (users ``kubectl apply`` the
manifests from a checkout, ``python -m pytest`` collects the suites there), so they are no
part of the ``draconf`` package directory.  A build copies them into it, as
``draconf/_bundle/suites`` and ``draconf/_bundle/manifests``, where an installed draconf finds
them through importlib.resources (draconf/bundle.py).  The sdist carries them at the top, as in
the repository (MANIFEST.in), so a wheel built from it (tox, pipx) gets them the same way.  An
editable install copies nothing: draconf/bundle.py finds them beside the package.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
BUNDLED = ("suites", "manifests")
PACKAGED = Path("draconf", "_bundle")  # draconf.bundle.PACKAGED


class BuildPyWithBundle(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / PACKAGED
        if target.exists():  # a file removed from suites/ must not outlive it in build/
            shutil.rmtree(target)
        for top in BUNDLED:
            for source in sorted((HERE / top).rglob("*")):
                name = source.relative_to(HERE)
                if source.is_file() and "__pycache__" not in name.parts and source.suffix != ".pyc":
                    self.mkpath(str((target / name).parent))
                    self.copy_file(str(source), str(target / name))


setup(cmdclass={"build_py": BuildPyWithBundle})
