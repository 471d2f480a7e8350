"""draconf report --history: runs kept once each, pass rates of the last runs."""

from __future__ import annotations

import json

import pytest

from draconf import history
from draconf.errors import DraconfError


def summary(run_id: str, outcome: str, started: str = "2026-11-30T01:00:00") -> dict:
    return {"run": {"run_id": run_id, "started": started},
            "tests": [{"workload": "single-gpu", "check": "cdi-injection", "outcome": outcome},
                      {"workload": None, "check": None, "outcome": "passed"}]}


def test_a_run_is_kept_once(tmp_path):
    assert history.append_run(tmp_path, summary("a", "passed"))
    assert not history.append_run(tmp_path, summary("a", "passed"))
    assert history.append_run(tmp_path, summary("a", "passed", started="2026-12-01T01:00:00"))
    assert len(history.load_runs(tmp_path)) == 2


def test_pass_rates_count_flaky_as_not_passed_and_keep_the_last(tmp_path):
    for i, outcome in enumerate(["passed", "flaky", "failed", "passed", "passed"]):
        history.append_run(tmp_path, summary(str(i), outcome))
    (rate,) = history.pass_rates(history.load_runs(tmp_path))
    assert (rate["passed"], rate["runs"], rate["last"]) == (3, 5, "passed")
    (last_two,) = history.pass_rates(history.load_runs(tmp_path, last=2))
    assert (last_two["passed"], last_two["runs"]) == (2, 2)


def test_a_damaged_history_is_one_clear_error(tmp_path):
    history.append_run(tmp_path, summary("a", "passed"))
    with (tmp_path / history.RUNS_FILE).open("a") as out:
        out.write("{not json\n")
    with pytest.raises(DraconfError, match=r"runs.jsonl:2: not a JSON line"):
        history.load_runs(tmp_path)


def test_no_history_yet_is_no_runs(tmp_path):
    assert history.load_runs(tmp_path / "new") == []
    assert json.loads(json.dumps(history.pass_rates([]))) == []
