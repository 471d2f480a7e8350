"""The HTML report of three runs shows history: real Allure 3 (npm, installed on first use)
builds three reports with ``draconf report --history``, from real pytest runs' results.

Not a unit test (it needs npm and takes about 20 s the first time), not a bed test (no
cluster): the report is built from results of a tiny suite whose one test fails on the
second night only.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = """
import os, pytest

@pytest.mark.draconf(workload="single-gpu", check="cdi-injection")
def test_sees_its_gpu():
    assert os.environ["NIGHT"] != "2", "sees no GPU"
"""


def embedded(html: Path) -> dict[str, dict]:
    """The data files the single-file report embeds (Allure's ``d("data/...", base64)``)."""
    return {name: json.loads(base64.b64decode(blob))
            for name, blob in re.findall(r'd\("(data/[^"]+)","([A-Za-z0-9+/=]+)"\)', html.read_text())}


def draconf(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "draconf.cli", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_three_nights_show_history_in_the_html_report_and_the_pass_rate(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_nightly.py").write_text(NIGHTLY)
    kept = tmp_path / "history"
    for night in (1, 2, 3):
        reports = tmp_path / f"night{night}"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite),
                        "-p", "draconf.pytest_plugin", f"--draconf-reports={reports}",
                        f"--alluredir={reports / 'allure-results'}"],
                       cwd=tmp_path, env={**os.environ, "NIGHT": str(night)}, capture_output=True, timeout=120)
        out = draconf("report", "--results", str(reports / "allure-results"), "--output", str(reports / "html"),
                      "--summary", str(reports / "summary.json"), "--history", str(kept), cwd=tmp_path).stdout
    # Allure's history: the third report knows the test's two earlier results.
    data = embedded(tmp_path / "night3" / "html" / "index.html")
    (result,) = [d for name, d in data.items() if name.startswith("data/test-results/")]
    assert [h["status"] for h in result["history"]] == ["failed", "passed"]
    assert len((kept / "allure-history.jsonl").read_text().splitlines()) == 3
    # draconf's own: the pass rate of the last runs, per workload x check.
    assert "pass rate over the last 3 run(s)" in out
    assert re.search(r"single-gpu\s+cdi-injection\s+2\s+3\s+66%\s+passed", out), out
