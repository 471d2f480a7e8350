"""A single-file HTML report from Allure results, built with Allure 3 (Node only, no Java).

``draconf report`` calls :func:`build_html_report`; the report groups failures by diagnosis
(the categories :func:`draconf.reporting.allure_categories` writes) and shows the run info.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

from draconf.errors import DraconfError
from draconf.reporting.allure_extras import allure_categories
from draconf.testbed.pins import cache_root

ALLURE_NPM_PACKAGE = "allure@3"


def build_html_report(results_dir: str | os.PathLike, output_dir: str | os.PathLike,
                      log: Callable[[str], None] = print,
                      history_file: str | os.PathLike | None = None) -> Path:
    """Turn an Allure results dir into one self-contained HTML file; returns its path.

    Uses the npm package ``allure`` (version 3, Node only), installed on first use under
    ``<cache_root()>/node``. The report groups failures by diagnosis (:func:`allure_categories`)
    and shows the run info from ``environment.properties``. Example::

        html = build_html_report("reports/allure-results", "reports/html")
        # -> reports/html/index.html

    With ``history_file`` (Allure 3's JSONL history), this run is appended to it and the
    report shows the runs before it: trends and each test's history.

    Raises DraconfError when node or npm is missing, the results dir holds no results, or
    Allure fails.
    """
    results_dir, output_dir = Path(results_dir).resolve(), Path(output_dir).resolve()
    _require_allure_results(results_dir)
    allure_cli = ensure_allure_cli(log)
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="draconf-allure-") as workdir:
        config_path = Path(workdir) / "allurerc.json"
        config = allure_config()
        if history_file is not None:
            config.update(historyPath=str(Path(history_file).resolve()), appendHistory=True)
        config_path.write_text(json.dumps(config), encoding="utf-8")
        command = [str(allure_cli), "generate", str(results_dir),
                   "--output", str(output_dir), "--config", str(config_path)]
        log(f"building HTML report from {results_dir}")
        # cwd is the temp dir so that no allurerc.* lying around the user's cwd is picked up.
        _run(command, cwd=workdir, what="Allure could not build the HTML report", timeout=600)
    html = output_dir / "index.html"
    if not html.is_file():
        raise DraconfError(f"Allure finished but wrote no {html}; see its output above")
    log(f"HTML report: {html}")
    return html


def allure_config() -> dict[str, Any]:
    """The Allure 3 config: the Awesome report as one file, failures grouped by diagnosis."""
    return {"name": "draconf conformance",
            "plugins": {"awesome": {"options": {"singleFile": True,
                                                "reportName": "draconf conformance"}}},
            "categories": allure_categories()}


def allure_node_dir() -> Path:
    """``~/.cache/draconf/node`` (or under ``$DRACONF_CACHE_DIR``): the npm prefix for Allure."""
    return cache_root() / "node"


def ensure_allure_cli(log: Callable[[str], None] = print) -> Path:
    """Path of the ``allure`` 3 CLI, installing it with npm on first use."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise DraconfError(
                f"{tool} is not installed; the HTML report needs Node.js and npm "
                "(e.g. `apt-get install nodejs npm`)")
    prefix = allure_node_dir()
    cli = prefix / "node_modules" / ".bin" / "allure"
    if not cli.exists():
        log(f"installing {ALLURE_NPM_PACKAGE} with npm into {prefix} (first use only)")
        prefix.mkdir(parents=True, exist_ok=True)
        _run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
              ALLURE_NPM_PACKAGE],
             cwd=prefix, what=f"npm could not install {ALLURE_NPM_PACKAGE}", timeout=900)
        if not cli.exists():
            raise DraconfError(f"npm installed {ALLURE_NPM_PACKAGE} but {cli} is missing; "
                               f"delete {prefix} and try again")
    return cli


def _require_allure_results(results_dir: Path) -> None:
    if not results_dir.is_dir():
        raise DraconfError(f"no Allure results directory at {results_dir}; run pytest with "
                           f"--alluredir {results_dir} first")
    if not any(results_dir.glob("*-result.json")):
        raise DraconfError(f"{results_dir} holds no Allure test results (*-result.json); "
                           f"run pytest with --alluredir {results_dir} first")


def _run(command: list[str], cwd: str | os.PathLike, what: str, timeout: float) -> str:
    """Run ``command``; on failure raise DraconfError(``what``) with the tail of its output."""
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "NO_COLOR": "1"})
    except subprocess.TimeoutExpired as err:
        raise DraconfError(f"{what}: `{' '.join(command)}` took longer than {timeout:.0f}s\n"
                           f"{_tail(_text(err.stdout) + _text(err.stderr))}") from None
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise DraconfError(f"{what}: `{' '.join(command)}` exited with {done.returncode}\n"
                           f"{_tail(output)}")
    return output


def _text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def _tail(output: str, lines: int = 20) -> str:
    """The last ``lines`` lines of ``output``, indented to set them apart from our message."""
    return "\n".join("    " + line for line in output.strip().splitlines()[-lines:])
