"""How `draconf run` hands its extra arguments to pytest (no cluster: the argv is inspected)."""

from __future__ import annotations

import pytest

from draconf import cli, run_args
from draconf.errors import EXIT_BAD_INPUT, EXIT_TARGET_UNUSABLE


def test_a_test_path_relative_to_the_checkout_selects_those_tests_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.selects_tests("suites/test_jobs.py::test_gpu_job_completes_on_the_gpu_it_was_given")
    assert cli._from_checkout("suites/test_jobs.py::t") == f"{cli.SUITES_DIR / 'test_jobs.py'}::t"
    assert not cli.selects_tests("-n") and not cli.selects_tests("4") and not cli.selects_tests("single-gpu")


def test_an_existing_path_is_kept_as_given(tmp_path, monkeypatch):
    (tmp_path / "test_mine.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert cli.selects_tests("test_mine.py") and cli._from_checkout("test_mine.py") == "test_mine.py"


def test_all_models_goes_to_pytest_under_draconfs_own_name():
    """`draconf run --all-models` is draconf's option, handed to the plugin as --draconf-all-models."""
    args, rest = cli.build_parser().parse_known_args(["run", "--all-models", "-x"])
    run_args.resolve_target(args)
    assert args.passthrough and rest == ["-x"]
    assert "--draconf-all-models" in run_args.plugin_args(args)


def test_kubeconfig_and_context_are_draconfs_and_imply_the_kubeconfig_target():
    """pytest-kind registers --kubeconfig in every pytest run: draconf's never reaches pytest."""
    args, rest = cli.build_parser().parse_known_args(["run", "--kubeconfig", "/k/config", "--context", "staging",
                                                      "-k", "single-gpu"])
    run_args.resolve_target(args)
    assert rest == ["-k", "single-gpu"] and args.target == "kubeconfig"
    assert {"--draconf-kubeconfig=/k/config", "--draconf-context=staging",
            "--draconf-target=kubeconfig"} <= set(run_args.plugin_args(args))


def test_no_abbreviations():
    """`--comp x` is not --compare: unknown to draconf, it goes to pytest (which refuses it)."""
    args, rest = cli.build_parser().parse_known_args(["run", "--comp", "x"])
    assert args.compare is None and rest == ["--comp", "x"]


def test_arguments_pytest_refuses_fail_before_any_bed_starts(tmp_path, monkeypatch, capsys):
    """Bad input changes nothing: no bed started, no report written, one line, exit 11."""
    monkeypatch.setenv("DRACONF_STATE_DIR", str(tmp_path / "state"))
    code = cli.main(["run", "--reports", str(tmp_path / "reports"), "--comp", "x"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.startswith("draconf: error: pytest refuses the arguments: ")
    assert "unrecognized arguments: --comp x" in err
    assert not (tmp_path / "state").exists() and not (tmp_path / "reports" / "summary.json").exists()


def test_a_selection_of_nothing_fails_before_any_bed_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DRACONF_STATE_DIR", str(tmp_path / "state"))
    code = cli.main(["run", "--reports", str(tmp_path / "reports"), "-k", "no-such-check"])
    assert code == 1 and "no tests were selected" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


def test_commands_against_an_unreachable_cluster_say_so_in_one_line(tmp_path, capsys):
    """sweep and audit printed the client's ~95-line traceback, and audit's exit 1 also meant
    'findings': now one line and exit 12, the target cannot be used."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n")
    for command in ("sweep", "audit"):
        assert cli.main([command, "--kubeconfig", str(kubeconfig)]) == EXIT_TARGET_UNUSABLE
        out, err = capsys.readouterr()
        assert err.startswith("draconf: error: cannot reach the API server at https://127.0.0.1:1")
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        # sweep deletes namespaces: it names the cluster and identity before anything else
        if command == "sweep":
            assert out == f"draconf: target: server https://127.0.0.1:1, context x, user u (kubeconfig {kubeconfig})\n"


def test_an_option_argparse_refuses_is_bad_input_not_argparse_2(capsys):
    # argparse exits 2, which pytest's table gives to "interrupted": draconf's own code instead.
    with pytest.raises(SystemExit) as exit_:
        cli.main(["lint", "--no-such-option", "x.yaml"])
    assert exit_.value.code == EXIT_BAD_INPUT
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_an_option_the_run_sets_itself_is_refused_before_any_bed_starts(tmp_path, monkeypatch, capsys):
    """`--draconf-reports X` given through to pytest wrote summary.json to X and JUnit to the
    run's reports, then printed the paths of reports it never wrote; `--draconf-kubeconfig`
    would win over the cluster the run printed.  Refused in one line, nothing written."""
    monkeypatch.setenv("DRACONF_STATE_DIR", str(tmp_path / "state"))
    for given, ours in (["--draconf-reports", str(tmp_path / "elsewhere")], "--reports DIR"), \
                       (["--draconf-kubeconfig=other"], "--kubeconfig"), (["--junitxml=x.xml"], "--reports DIR"):
        code = cli.main(["run", "--reports", str(tmp_path / "reports"), *given])
        err = capsys.readouterr().err
        assert code == EXIT_BAD_INPUT and err.startswith("draconf: error: ") and f"give {ours} instead" in err, err
    assert not (tmp_path / "state").exists() and not (tmp_path / "reports").exists()
    assert not (tmp_path / "elsewhere").exists()


def test_draconfs_own_run_options_after_the_separator_are_refused_before_anything_starts(tmp_path, monkeypatch,
                                                                                          capsys):
    """`draconf run -- --kubeconfig F` handed --kubeconfig F to pytest, where pytest-kind-ng's
    option of that name took it silently and the run went to $KUBECONFIG's cluster.  Every
    option of draconf run's own after `--` is bad input, said in one line: nothing started.
    (The run's own target is a server that refuses connections: were the options let through,
    the run would end there, exit 12, rather than start a bed.)"""
    monkeypatch.setenv("DRACONF_STATE_DIR", str(tmp_path / "state"))
    refusing = tmp_path / "kubeconfig"
    refusing.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n")
    for given in (["--kubeconfig", str(tmp_path / "kc")], ["--context=staging"], ["-x", "--profile", "example"],
                  ["--image", "mirror/ubuntu:24.04"], ["--target", "kind"], ["--reruns=2"], ["--every-node"]):
        code = cli.main(["run", "--kubeconfig", str(refusing), "--reports", str(tmp_path / "reports"), "--", *given])
        err = capsys.readouterr().err
        name = next(a for a in given if a.startswith("--")).split("=")[0]
        assert code == EXIT_BAD_INPUT, (given, err)
        assert err == (f"draconf: error: {name} is an option of draconf run, not pytest's: give it before "
                       "`--` (after it, it goes to pytest, where a plugin may take it)\n"), err
    assert not (tmp_path / "state").exists() and not (tmp_path / "reports").exists()


def test_the_same_options_before_the_separator_are_draconfs():
    args, rest = cli.build_parser().parse_known_args(["run", "--kubeconfig", "kc", "--", "-x"])
    run_args.refuse_reserved(rest, args.own_options)  # -x is pytest's: no error
    assert args.kubeconfig == "kc" and "--kubeconfig" in args.own_options and "--help" not in args.own_options
