"""How `draconf run` hands its extra arguments to pytest (no cluster: the argv is inspected)."""

from __future__ import annotations

from draconf import cli


def test_a_test_path_relative_to_the_checkout_selects_those_tests_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.selects_tests("suites/test_jobs.py::test_gpu_job_completes_on_the_gpu_it_was_given")
    assert cli._from_checkout("suites/test_jobs.py::t") == f"{cli.SUITES_DIR / 'test_jobs.py'}::t"
    assert not cli.selects_tests("-n") and not cli.selects_tests("4") and not cli.selects_tests("single-gpu")


def test_an_existing_path_is_kept_as_given(tmp_path, monkeypatch):
    (tmp_path / "test_mine.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert cli.selects_tests("test_mine.py") and cli._from_checkout("test_mine.py") == "test_mine.py"


def test_all_models_goes_to_pytest():
    """`draconf run --all-models` is pytest's option (draconf/pytest_plugin.py), passed through."""
    args, rest = cli.build_parser().parse_known_args(["run", "--all-models", "-x"])
    assert args.passthrough and rest == ["--all-models", "-x"]
    assert not cli.selects_tests("--all-models")
