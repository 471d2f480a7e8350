"""The MIG scenario (suites/test_mig.py) on real-node beds: it passes where the driver publishes
MIG devices (DynamicMIG on, ``mixed-mig.yaml``), and is skipped, with the reason, where it
does not (the healthy default bed: the chart's default, DynamicMIG off).

The faults that fail it (mig-counters-ignored, mig-caps-missing, mig-parent-mislabelled) are matrix rows
(tests/matrix/faultmatrix.py) and symptoms in test_faults.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from draconf.reporting.run_verdict import EXIT_INCONCLUSIVE
from draconf.testbed import inventory

from .conftest import _start, _stop

REPO = Path(__file__).resolve().parents[2]
MIG_FLEET = REPO / "draconf" / "testbed" / "data" / "inventories" / "mixed-mig.yaml"
CHECKS = {"by-profile", "same-parent", "exclusive"}


@pytest.fixture(scope="module")
def mig_bed():
    bed = _start("selftest-mig", [], inventory.load(MIG_FLEET))
    yield bed
    _stop(bed)


def run(bed, tmp_path, selection: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "draconf.cli", "run", "--testbed-name", bed.name,
                           "--reports", str(tmp_path / "reports"), "-k", selection],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    return {t["check"]: t for t in summary["tests"] if t["workload"] in ("mig", "preflight")}, proc


def test_mig_scenario_passes_where_mig_devices_are_published(mig_bed, tmp_path):
    rows, proc = run(mig_bed, tmp_path, "test_preflight or test_mig")
    outcomes = {check: row["outcome"] for check, row in rows.items()}
    # Preflight too: the MIG devices (no uuid: they are mig.nvidia.com's) fail no attribute check.
    assert set(outcomes.values()) == {"passed"} and CHECKS <= set(outcomes), (outcomes, proc.stdout[-3000:])


def test_mig_scenario_is_skipped_without_mig_devices(healthy_bed, tmp_path):
    rows, proc = run(healthy_bed, tmp_path, "test_mig")
    # A run of skips only proved nothing: never green, and its last line says why.
    assert proc.returncode == EXIT_INCONCLUSIVE, proc.stdout[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("draconf: INCONCLUSIVE: "), proc.stdout[-3000:]
    assert {c: r["outcome"] for c, r in rows.items() if c in CHECKS} == dict.fromkeys(CHECKS, "skipped"), proc.stdout[-3000:]
    assert all("no published device matches DeviceClass mig.nvidia.com" in (rows[c].get("message") or "")
               for c in CHECKS), [rows[c].get("message") for c in CHECKS]
