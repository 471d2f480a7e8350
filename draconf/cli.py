"""The ``draconf`` command.

    draconf run [--target T] [--profile P] [pytest args]   run the conformance suite, write reports/
    draconf run --target kind [--keep-cluster]   ... on a kind cluster with dra-example-driver
    draconf report                   single-file HTML report from reports/allure-results
    draconf sweep                    delete what a killed run left in the cluster
    draconf audit                    namespaces whose GPU quota DRA claims bypass (read-only)
    draconf lint FILE...             what each CEL selector in FILEs selects on the cluster (read-only)
    draconf testbed build            build the pinned control plane into the cache
    draconf testbed up [--fault F]   start the embedded test bed (idempotent)
    draconf testbed status | env     where it is and how to point kubectl at it
    draconf testbed down             stop it and remove its state
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from draconf import baseline, bundle, cli_testbed, expectations, gate_report, run_args
from draconf.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, DraconfError, TargetUnusable
from draconf.reporting.run_verdict import EXIT_INCONCLUSIVE


#: The installed package's suites, or the checkout's (draconf.bundle); its parent is the rootdir.
SUITES_DIR = bundle.SUITES


#: pytest-rerunfailures' exit status when --fail-on-flaky finds a flaky test; draconf's is 1.
FLAKY_FAILS_THE_RUN = 7


def _non_negative(text: str) -> int:
    """argparse type: a count, 0 or more.

    >>> _non_negative("2")
    2
    """
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 or more, not {text!r}")
    return value


def selects_tests(arg: str) -> bool:
    """True for a pytest argument naming tests: an existing file or directory, or a node id
    (``suites/test_workloads.py::TestWorkload``), rather than an option or its value.

    >>> selects_tests("suites/test_jobs.py"), selects_tests("suites/test_jobs.py::test_x")
    (True, True)
    >>> selects_tests("-k"), selects_tests("single-gpu")
    (False, False)
    """
    if arg.startswith("-"):
        return False
    return Path(arg.split("::", 1)[0]).exists() or (SUITES_DIR.parent / arg.split("::", 1)[0]).exists()


def _from_checkout(arg: str) -> str:
    """A test path relative to the suites' root (``suites/...``) made absolute, so it selects the
    same tests from any directory.  That root is the installed package's when draconf is not an
    editable install, even from a checkout (tox): the run's rootdir and node ids are the
    package's, not the checkout's copy beside it.  Any other path is kept as given."""
    path, _, rest = arg.partition("::")
    if not (SUITES_DIR.parent / path).exists():
        return arg
    return str(SUITES_DIR.parent / path) + (f"::{rest}" if rest else "")


def cmd_run(args, pytest_args: list[str]) -> int:
    """Run the suite; with ``--target kind`` on a kind cluster made (or kept) for the run."""
    # Bad input, before any bed, kind cluster or report.
    run_args.refuse_reserved(pytest_args, getattr(args, "own_options", ()))
    if args.target != "kind":
        if args.keep_cluster or args.kind_image or args.kind_name != "draconf":
            raise DraconfError("--keep-cluster, --kind-name and --kind-image go with --target kind")
        args.profile = args.profile or "nvidia"
        return _run_suite(args, pytest_args)
    from draconf.testbed.cluster import state_root
    from draconf.testbed.kind import DEFAULT_IMAGE, KindTarget
    from draconf.profile import resolve
    args.profile = args.profile or "example"
    resolve(args.profile)  # bad input fails before a cluster is made, not minutes later
    if args.compare:
        baseline.load(args.compare)
    target = KindTarget(args.kind_name, state_root().parent / "kind" / args.kind_name,
                        image=args.kind_image or DEFAULT_IMAGE, keep=args.keep_cluster,
                        log=lambda m: print(f"[draconf] {m}", flush=True))
    try:
        os.environ["KUBECONFIG"] = str(target.start())
        args.target = "kubeconfig"
        return _run_suite(args, pytest_args)
    finally:
        target.stop()


def _run_suite(args, pytest_args: list[str]) -> int:
    """Run the suite in-process with the reports switched on."""
    import pytest
    if not SUITES_DIR.is_dir():
        raise DraconfError(f"the suites directory {SUITES_DIR} is missing: this draconf was built "
                           "without it; reinstall it (`pip install draconf`, or `pip install .` in a checkout)")
    if args.target == "testbed" and not getattr(args, "image", None):
        args.image = run_args.bed_workload_image(cli_testbed.bed_of(args))
    if args.target == "testbed":
        args.target_limit = run_args.bed_limits(cli_testbed.bed_of(args))
    reports = Path(args.reports).resolve()  # made once the target is known to answer
    # `draconf run -- -n 4`: the separator is for draconf's own parser, not pytest's.
    pytest_args = [a for a in pytest_args if a != "--"]
    # Test files or node ids select those tests, as with pytest; otherwise the whole suite.
    pytest_args = [_from_checkout(a) if selects_tests(a) else a for a in pytest_args]
    chosen = [a for a in pytest_args if selects_tests(a)]
    selection = [
        *([] if chosen else [str(SUITES_DIR)]), f"--rootdir={SUITES_DIR.parent}", "-p", "no:cacheprovider",
        # The checkout's tox.ini adds --doctest-modules for the project's own tests: a
        # conformance run collects the checks only, never the suite modules' doctests.
        "-o", "addopts=--import-mode=importlib",
        *run_args.plugin_args(args)]
    argv = [
        *selection,
        f"--junitxml={reports / 'junit.xml'}",
        f"--alluredir={reports / 'allure-results'}", "--clean-alluredir",
        f"--draconf-reports={reports}",
        *log_options(reports),
        "-rfEs",
    ]
    if args.reruns:
        argv.append(f"--reruns={args.reruns}")
    if args.allow_inconclusive:
        argv.append("--draconf-allow-inconclusive")
    if any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in pytest_args):
        argv.append("--dist=loadgroup")  # a workload's three checks share one deployment
    before = baseline.load(args.compare) if args.compare else None  # a bad file fails first
    expectations.Expectations.of(None, args.expect_feature, args.waive_feature)  # so does a bad name
    # --all-models and the sweep read the cluster to collect: the run itself checks those.
    reads_cluster = ("--draconf-all-models", "--draconf-every-node", "--draconf-every-gpu")
    run_args.check_selection([a for a in selection if a not in reads_cluster], pytest_args,
                     judge_selection=not set(reads_cluster) & set(selection))
    _prepare_target(args)
    reports.mkdir(parents=True, exist_ok=True)
    code = int(pytest.main(argv + pytest_args))
    # pytest's own codes that mean something else in draconf's table (RUN_EXIT_CODES).
    if code == pytest.ExitCode.INTERRUPTED:
        code = EXIT_INTERRUPTED
    elif code == pytest.ExitCode.USAGE_ERROR:
        code = EXIT_BAD_INPUT
    if code == FLAKY_FAILS_THE_RUN:
        print("draconf: flaky tests fail this run (--fail-on-flaky)", file=sys.stderr)
        code = 1
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("draconf: error: no tests were selected; check the -k/-m arguments", file=sys.stderr)
        return 1
    # Only what the run wrote (a run pytest refused before collecting wrote nothing).
    written = [p for p in (reports / "summary.json", reports / "junit.xml", reports / "allure-results") if p.exists()]
    if written:
        print(f"reports: {', '.join(map(str, written))}"
              + (" (HTML: draconf report)" if reports / "allure-results" in written else ""))
    summary = json.loads((reports / "summary.json").read_text()) if (reports / "summary.json").is_file() else None
    if summary and (args.save_baseline or before) and code != EXIT_INTERRUPTED:
        now = _snapshot(args, summary["tests"])
        if args.save_baseline:
            print(f"baseline: {baseline.save(args.save_baseline, now)}")
        if before is not None:
            changes = baseline.compare(before, now, **_gate_rules(args))
            if _print_changes(changes, args.compare):
                code = code or 1
                gate_report.record(reports, [c for c in changes if c.regression], args.compare)
    if getattr(args, "html", False) and (reports / "allure-results").is_dir():
        _build_html(reports)
    if summary:
        # The last line of the output: what a CronJob's log or a CI step shows first.
        counts = ", ".join(f"{n} {outcome}" for outcome, n in summary["totals"].items() if n)
        print(f"draconf: {_last_word(code, summary.get('verdict'))} ({counts or ('none finished' if code == EXIT_INTERRUPTED else 'no tests')}); exit {code}")
    return code


def log_options(reports: Path) -> list[str]:
    """How a run logs: INFO and above on the terminal, live and in a failure's captured log;
    everything in ``REPORTS/debug.log``, with what the terminal leaves out (a failure's or a
    diagnosis's traceback and the client's errors in full, logged at DEBUG).  ``log_level`` is
    set here, not left to an ini file: an installed draconf's suites have none, and pytest's
    captured log would then show DEBUG records (tracebacks) in the terminal's failure reports."""
    return ["-o", "log_cli=true", "--log-cli-level=INFO", "-o", "log_cli_format=%(asctime)s %(message)s",
            "-o", "log_level=INFO", f"--log-file={reports / 'debug.log'}", "--log-file-level=DEBUG"]


def _build_html(reports: Path) -> None:
    """``run --html``: the HTML report beside the others. One that cannot be built is said in
    one line and leaves the run's verdict and exit code as they are."""
    from draconf.htmlreport import build_html_report
    try:
        build_html_report(reports / "allure-results", reports / "html",
                          log=lambda line: print(f"[draconf] {line}", flush=True))
    except DraconfError as err:
        print(f"draconf: the HTML report was not built: {str(err).splitlines()[0]}", file=sys.stderr)


def _last_word(code: int, verdict: dict | None) -> str:
    """PASS, FAIL or INCONCLUSIVE with its reasons, as the exit code says.

    >>> _last_word(0, {"status": "PASS", "line": "PASS"})
    'PASS'
    >>> _last_word(10, {"status": "INCONCLUSIVE", "line": "INCONCLUSIVE: 2 without a verdict: 2 node-excluded"})
    'INCONCLUSIVE: 2 without a verdict: 2 node-excluded'
    >>> _last_word(1, {"status": "INCONCLUSIVE", "line": "INCONCLUSIVE: ..."})  # a baseline regressed
    'FAIL'
    >>> _last_word(EXIT_INTERRUPTED, {"status": "INCONCLUSIVE", "line": "INCONCLUSIVE: 800 not run (interrupted)"})
    'INTERRUPTED'
    """
    if code == EXIT_INTERRUPTED:
        return "INTERRUPTED"  # neither a verdict on the cluster nor a failure of it
    if code == EXIT_INCONCLUSIVE or (code == 0 and verdict and verdict["status"] == "INCONCLUSIVE"):
        return verdict["line"] if verdict else "INCONCLUSIVE"
    return "PASS" if code == 0 else "FAIL"


def _snapshot(args, tests=()) -> dict:
    from draconf.profile import for_target, resolve
    profile = for_target(resolve(args.profile), args.target)
    return baseline.snapshot(_target_api(args), profile, tests)


def _print_changes(changes: list, against: str) -> int:
    """Print the changes; return how many are regressions."""
    regressions = [c for c in changes if c.regression]
    for change in changes:
        print(f"  {change}")
    print(f"compared with {against}: {len(regressions)} regression(s), "
          f"{len(changes) - len(regressions)} other change(s)")
    return len(regressions)


def _kinds(text: str) -> frozenset[str]:
    """argparse type: comma-separated kinds of change (baseline.KINDS).

    >>> sorted(_kinds("slower,memory"))
    ['memory', 'slower']
    """
    kinds = frozenset(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(kinds - set(baseline.KINDS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown kind of change {', '.join(unknown)}; "
                                         f"choose from: {', '.join(baseline.KINDS)}")
    return kinds


def _gate_rules(args) -> dict:
    """Which kinds of change count as regressions, and how much slower a verdict may get."""
    counted = {kind: default and kind not in args.tolerate or kind in args.count
               for kind, default in baseline.KINDS.items()}
    return {"regressions": counted, "slower_factor": args.slower_factor}


def cmd_compare(args) -> int:
    """Exit 0: no regression; 1: regressions; 11: bad input (a baseline that cannot be read);
    12: the cluster cannot be used (when comparing with it now)."""
    before = baseline.load(args.baseline)
    now = baseline.load(args.current) if args.current else _snapshot(args)
    return 1 if _print_changes(baseline.compare(before, now, **_gate_rules(args)), args.baseline) else 0


def _prepare_target(args) -> None:
    """Start the bed once, before pytest (xdist workers must not race to start it), and hand
    the run's metadata to every pytest process through the environment."""
    from draconf import namespaces, runinfo
    from draconf.profile import for_target, resolve
    profile = for_target(resolve(args.profile), args.target, getattr(args, "image", None))
    run_id = namespaces.RunId.for_this_run().value
    os.environ.setdefault("DRACONF_RUN_ID", run_id)
    try:
        if args.target == "testbed":
            from draconf.kube import connect
            from draconf.testbed import inventory
            from draconf.testbed.cluster import Testbed
            bed = Testbed.named(args.testbed_name)
            if not bed.is_up:
                bed.up(inventory.load(), faults=[], log=lambda m: print(f"[draconf] {m}", flush=True))
            api = connect(bed.kubeconfig)
        else:
            api = _connect_target(args)
        # Before anything is created: which cluster, as whom (a kubeconfig's current context
        # may not be the cluster the user has in mind); then, once, whether it can be used.
        where = f"embedded test bed {args.testbed_name!r}, " if args.target == "testbed" else ""
        print(f"draconf: target: {where}{api.describe()}", flush=True)
        _probe(api)  # one line, before pytest prints anything
        os.environ.update(runinfo.to_env(runinfo.collect(api, profile, args.target, os.environ["DRACONF_RUN_ID"])))
    except DraconfError:
        raise
    except Exception as err:  # pytest's own target handling reports the problem in full
        print(f"[draconf] could not read run information up front: {err}", flush=True)


def cmd_report(args) -> int:
    from draconf import history
    from draconf.htmlreport import build_html_report
    history_file = None
    if args.history:
        summary_path = Path(args.summary)
        if not summary_path.is_file():
            raise DraconfError(f"{summary_path} does not exist: run `draconf run` first (or give --summary)")
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise DraconfError(f"{summary_path} is not JSON ({err.msg}); it is written by `draconf run`") from None
        kept = history.append_run(Path(args.history), summary)
        print(f"history: {Path(args.history) / history.RUNS_FILE} "
              f"({'this run added' if kept else 'this run was already there'})")
        history_file = Path(args.history) / history.ALLURE_HISTORY_FILE
    html = build_html_report(args.results, args.output, history_file=history_file)
    print(f"report: {html}")
    if args.history:
        runs = history.load_runs(Path(args.history), last=args.last)
        print(f"pass rate over the last {len(runs)} run(s) kept in {args.history}:")
        print(history.render(history.pass_rates(runs)))
    return 0


def _target_api(args, announce: bool = False):
    """The target's API, probed: an unusable cluster is one line now, not a client traceback
    at the command's first read.  ``announce``: first print which cluster, as whom, as
    ``draconf run`` does (for a command that deletes or creates objects there)."""
    from draconf.kube import connect
    if args.target == "testbed":
        bed = cli_testbed.bed_of(args)
        if not bed.is_up:
            raise DraconfError(f"test bed {bed.name!r} is not up; start it or use --target kubeconfig")
        api = connect(bed.kubeconfig)
        where = f"embedded test bed {bed.name!r}, "
    else:
        api, where = _connect_target(args), ""
    if announce:
        print(f"draconf: target: {where}{api.describe()}", flush=True)
    if args.target != "testbed":
        _probe(api)
    return api


def _connect_target(args):
    from draconf.kube import connect_target
    return connect_target(args.target, args.context, args.kubeconfig)


def _probe(api) -> None:
    from draconf.preflight.runner import probe
    unusable = probe(api)
    if unusable:
        raise TargetUnusable(unusable)


def cmd_sweep(args) -> int:
    from draconf import namespaces
    api = _target_api(args, announce=True)  # it deletes namespaces: say where first
    run = namespaces.RunId(args.run_id) if args.run_id else None
    removed = namespaces.sweep(api, run)
    print(f"removed {len(removed)} namespace(s) left by draconf"
          + (f" run {args.run_id}" if args.run_id else ""))
    return 0


def cmd_audit(args) -> int:
    """Read-only: namespaces whose GPU quota no longer binds after a move to DRA claims.

    Exit 0: no such namespace; 1: some (findings); 11: bad input (unknown profile, bad
    kubeconfig, a bed that is not up); 12: the cluster cannot be used or read, as for every
    command.
    """
    from draconf.audit import audit_quotas, format_findings
    from draconf.kube import label_selector
    from draconf.namespaces import MANAGED_BY
    from draconf.profile import resolve
    api = _target_api(args)
    findings = audit_quotas(api, device_class=resolve(args.profile).device_class,
                            exclude_selector=label_selector(MANAGED_BY))
    print(format_findings(findings))
    return 1 if findings else 0


def cmd_lint(args) -> int:
    """Read-only: each CEL selector of the files judged over the cluster's published devices.

    Exit 0: every selector matches some device and fails on none; 1: some selector matches
    nothing, fails (compile or runtime error) or names a missing DeviceClass; 11: bad input
    (unreadable or invalid file); 12: the cluster cannot be used (unreachable, untrusted,
    credentials rejected, or its slices and classes cannot be read), as for every command.
    """
    from draconf import lint
    from draconf.devices import class_selectors, devices_from_slices
    found = lint.load_files(args.files)  # bad files fail before the cluster is contacted
    api = _target_api(args)
    try:
        slices = api.resource.list_resource_slice(_request_timeout=15).items
        wanted = {f.device_class for f in found if f.device_class} - set(lint.classes_in(found))
        classes = {name: class_selectors(api, name) for name in sorted(wanted)}
    except DraconfError:
        raise
    except Exception as err:  # urllib3 / ApiException: one line, not a traceback
        reason = getattr(err, "reason", None) or err.__class__.__name__
        raise TargetUnusable(f"cannot read ResourceSlices and DeviceClasses from {api.source}: "
                             f"{' '.join(str(reason).split())[:300]}") from None
    classes.update(lint.classes_in(found))
    judgements = lint.judge(found, devices_from_slices(slices), classes)
    print(lint.format_table(judgements))
    return lint.EXIT_OK if all(j.ok for j in judgements) else lint.EXIT_FINDINGS


RUN_EXIT_CODES = f"""\
exit codes:
  0   PASS: every selected check that applies passed, and at least one did
  1   FAIL: a check failed or broke, a compared baseline regressed, no tests were selected,
      or a flaky test under --fail-on-flaky
  3   internal error (pytest's: a bug in draconf or a plugin; reports/debug.log has it)
  {EXIT_INCONCLUSIVE}  INCONCLUSIVE: nothing failed, but some check had no verdict or never ran, or
      nothing passed (a run of skips only); --allow-inconclusive makes it 0
  {EXIT_BAD_INPUT}  bad input (kubeconfig, profile, baseline, option, also an option pytest
      refused); nothing was created
  {TargetUnusable.exit_code}  the target cannot be used at all (unreachable, untrusted, credentials rejected)
  {EXIT_INTERRUPTED} interrupted (Ctrl-C or SIGTERM), before or during the run
options draconf does not know go to pytest (-k, -m, -n N, -x ...); draconf's own go before `--`
(after it, where pytest's plugins would read them, they are refused as bad input)."""


def exit_codes(ok: str, findings: str | None = None, summary: bool = False) -> str:
    """The exit codes of a command that reads a cluster: 0 ``ok``, 1 ``findings``, then
    draconf's bad input and unusable target; ``summary``: in one line, for the list of commands.

    >>> exit_codes("no regression", "regressions", summary=True)
    'exit 0 no regression, 1 regressions, 11 bad input, 12 target unusable'
    """
    if summary:
        return ", ".join([f"exit 0 {ok}", *([f"1 {findings}"] if findings else []),
                          f"{EXIT_BAD_INPUT} bad input", f"{TargetUnusable.exit_code} target unusable"])
    return "\n".join([
        "exit codes:", f"  0   {ok}", *([f"  1   {findings}"] if findings else []),
        f"  {EXIT_BAD_INPUT}  bad input (kubeconfig, profile, file, option, a test bed that is not up)",
        f"  {TargetUnusable.exit_code}  the target cannot be used (unreachable, untrusted, credentials "
        "rejected, or it stopped answering)"])


#: What 0 and 1 mean for each command that reads a cluster: (short, in the list of commands;
#: long, in its own --help).
READING_COMMANDS = {
    "compare": (("no regression", "regressions"),
                ("no regression", "regressions (listed)")),
    "sweep": (("done", None), ("done (also when nothing was left)", None)),
    "audit": (("none found", "findings"),
              ("no namespace caps nvidia.com/gpu without a DeviceClass quota", "such namespaces (listed)")),
    "lint": (("all match", "findings"),
             ("every selector matches some device and fails on none",
              "some selector matches nothing, fails, or names a missing DeviceClass")),
}


class _Parser(argparse.ArgumentParser):
    """Every subcommand's parser: no abbreviated options (see build_parser), and a bad option
    exits with draconf's bad-input code, not argparse's 2 (pytest's "interrupted")."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _version() -> str:
    from importlib import metadata
    try:
        return metadata.version("draconf")
    except metadata.PackageNotFoundError:
        from draconf import __version__
        return __version__


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: `--comp x` must not silently mean --compare, and an option pytest knows
    # (--co) must reach pytest rather than be called ambiguous.
    parser = _Parser(prog="draconf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"draconf {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def with_target(p, name_flag="--testbed-name", extra=()):
        p.add_argument("--target", choices=["testbed", "kubeconfig", "in-cluster", *extra], default=None,
                       help="the embedded test bed (the default), a kubeconfig's cluster (the default "
                            "when --kubeconfig or --context is given), or the cluster of the pod draconf "
                            "runs in (its ServiceAccount)"
                            + ("; kind: a kind cluster made for the run (needs kind and Docker)" if extra else ""))
        p.add_argument("--kubeconfig", metavar="FILE",
                       help="the kubeconfig of the cluster under test (default: $KUBECONFIG, else ~/.kube/config)")
        p.add_argument("--context", metavar="NAME",
                       help="the kubeconfig context to use (default: its current context)")
        p.add_argument("--kube-context", dest="context", help=argparse.SUPPRESS)  # the old spelling
        # --name and --testbed-name, both, on every command: one spelling must not fail on the
        # next command (run had only --testbed-name, the others only --name).
        p.add_argument(name_flag, "--testbed-name" if name_flag == "--name" else "--name",
                       dest="testbed_name" if name_flag != "--name" else "name",
                       default="default", help="which embedded test bed (default: %(default)s)")
        return p

    def with_gate_rules(p):
        kinds = ", ".join(f"{k}{'' if v else ' (not counted by default)'}" for k, v in baseline.KINDS.items())
        p.add_argument("--tolerate", type=_kinds, default=frozenset(), metavar="KINDS",
                       help=f"kinds of change not to count as regressions, comma-separated; kinds: {kinds}")
        p.add_argument("--count", type=_kinds, default=frozenset(), metavar="KINDS",
                       help="kinds of change to count as regressions beyond the default ones")
        p.add_argument("--slower-factor", type=float, default=baseline.SLOWER_FACTOR, metavar="F",
                       help="a passing verdict this many times (and 1 s) slower regresses (default: %(default)s)")
        return p

    p = with_target(sub.add_parser(
        "run", help="run the conformance suite and write reports (extra args go to pytest)",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=RUN_EXIT_CODES), extra=("kind",))
    p.add_argument("--profile", default=None,
                   help="driver profile: a built-in name (nvidia, example) or a YAML file "
                        "(default: nvidia; example with --target kind)")
    p.add_argument("--keep-cluster", action="store_true",
                   help="--target kind: reuse the kind cluster if it exists and keep it afterwards")
    p.add_argument("--kind-name", default="draconf", help="--target kind: the cluster's name (default: %(default)s)")
    p.add_argument("--kind-image", default=None,
                   help="--target kind: the node image (default: the example driver's, kindest/node:v1.34.0)")
    p.add_argument("--image", metavar="IMAGE",
                   help="the image the workloads run (a mirror an air-gapped cluster can pull; default: "
                        "the profile's, ubuntu:24.04 for nvidia)")
    p.add_argument("--expect-feature", action="append", default=[], metavar="FEATURE",
                   help="fail, not skip, when this feature is missing (repeatable; features GA in the "
                        "server's Kubernetes version are expected anyway): "
                        + ", ".join(expectations.FEATURES))
    p.add_argument("--waive-feature", action="append", default=[], metavar="FEATURE",
                   help="accept this feature missing (a skip), even if GA (repeatable)")
    p.add_argument("--every-node", action="store_true",
                   help="also prove every GPU node: a claim pinned to each node that publishes GPUs is "
                        "allocated, its GPU seen by a container and released (one verdict per node; "
                        "add -m every_node for the sweep alone)")
    p.add_argument("--every-gpu", action="store_true",
                   help="the sweep over every GPU instead: each published GPU allocated once, by its "
                        "uuid, and seen by a container (one verdict per GPU; implies the sweep)")
    p.add_argument("--sweep-max-gpus", type=int, default=None, metavar="N",
                   help="how many GPUs the sweep may hold at once (default: a tenth of the "
                        "published GPUs, at least one); GPUs others hold are never taken")
    p.add_argument("--all-models", action="store_true",
                   help="also run model-selected and memory-selected once per published product name "
                        "and memory size")
    p.add_argument("--no-preflight-gate", action="store_true",
                   help="run the workloads even when a blocking preflight check fails")
    p.add_argument("--reports", default="reports", help="where reports go (default: %(default)s)")
    p.add_argument("--html", action="store_true",
                   help="also build the HTML report, REPORTS/html/index.html, before the last line "
                        "(as `draconf report` does; needs Node.js; the exit code stays the run's)")
    p.add_argument("--keep-on-failure", action="store_true",
                   help="keep a failed test's namespace for inspection")
    p.add_argument("--reruns", type=_non_negative, default=0, metavar="N",
                   help="run a failure that may not persist (diagnosed intermittent or timeout) up "
                        "to N more times; one that then passes is reported flaky (default: 0; "
                        "add --fail-on-flaky to fail the run on it)")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="exit 0 when no check failed, even if some had no verdict or none passed "
                        "(a partial run accepted as green; the last line still says INCONCLUSIVE)")
    p.add_argument("--save-baseline", metavar="FILE",
                   help="after the run, save the cluster's DRA state and the verdicts (upgrade gate)")
    p.add_argument("--compare", metavar="BASELINE",
                   help="after the run, compare with a saved baseline; regressions fail the run")
    with_gate_rules(p)
    p.set_defaults(func=cmd_run, passthrough=True, own_options=run_args.own_options(p))

    def reading(name: str, help_: str, in_list: bool = True):
        """A command that reads a cluster: its exit codes in its --help (and in the list)."""
        short, long = READING_COMMANDS[name]
        listed = f" ({exit_codes(*short, summary=True)})" if in_list else ""
        return with_target(sub.add_parser(name, help=help_ + listed, epilog=exit_codes(*long),
                                          formatter_class=argparse.RawDescriptionHelpFormatter),
                           name_flag="--name")

    p = reading("compare", "what changed from a baseline to another, or to the cluster now")
    p.add_argument("baseline", metavar="BASELINE")
    p.add_argument("current", metavar="CURRENT", nargs="?",
                   help="a later baseline (default: the target cluster now, without verdicts)")
    p.add_argument("--profile", default="nvidia", help="driver profile (gives the driver)")
    with_gate_rules(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", help="build a single-file HTML report from the Allure results")
    p.add_argument("--results", default="reports/allure-results")
    p.add_argument("--output", default="reports/html")
    p.add_argument("--history", metavar="DIR",
                   help="keep this run in DIR (runs.jsonl, Allure's allure-history.jsonl): the report "
                        "shows trends and per-test history, and the pass rate of the last runs is printed")
    p.add_argument("--summary", default="reports/summary.json",
                   help="the run's summary.json, kept in the history (default: %(default)s)")
    p.add_argument("--last", type=_non_negative, default=10, metavar="N",
                   help="pass rates over the last N runs kept (default: %(default)s; 0: all)")
    p.set_defaults(func=cmd_report)

    p = reading("sweep", "delete namespaces a killed draconf run left behind", in_list=False)
    p.add_argument("--run-id", help="only this run's namespaces (default: every draconf namespace)")
    p.set_defaults(func=cmd_sweep)

    p = reading("audit", "read-only: list namespaces capping nvidia.com/gpu but no DeviceClass quota")
    p.add_argument("--profile", default="nvidia", help="driver profile (gives the DeviceClass)")
    p.set_defaults(func=cmd_audit)

    p = reading("lint", "read-only: which published devices each CEL selector in FILEs matches, or "
                        "the scheduler's error")
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML manifests (claims, templates, DeviceClasses)")
    p.set_defaults(func=cmd_lint)

    cli_testbed.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if hasattr(args, "kubeconfig"):
            run_args.resolve_target(args)
        if getattr(args, "passthrough", False):
            return args.func(args, rest)
        return args.func(args)
    except DraconfError as err:
        print(f"draconf: error: {err}", file=sys.stderr)
        return err.exit_code
    except Exception as err:
        # The API server's or the network's answer in the middle of a command (the target was
        # usable when it started): one line, not the client's traceback.
        from kubernetes.client.exceptions import ApiException
        import urllib3
        if not isinstance(err, (ApiException, urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)):
            raise
        from draconf.reporting.verdict import api_answer
        said = api_answer(err) if isinstance(err, ApiException) else f"the API server cannot be reached: {err}"
        print(f"draconf: error: {said}", file=sys.stderr)
        return TargetUnusable.exit_code
    except KeyboardInterrupt:
        print("draconf: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
