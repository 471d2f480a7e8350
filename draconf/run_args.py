"""What ``draconf run`` hands to pytest, checked before any cluster is touched: which target
its cluster options name (:func:`resolve_target`), the plugin's own option names
(:func:`plugin_args`), none of them given again behind its back and none of draconf's own after
``--`` (:func:`refuse_reserved`), what pytest makes of the arguments (:func:`check_selection`),
and the workload image a bed of NVIDIA's own driver needs (:func:`bed_workload_image`)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from typing import Iterable

from draconf.errors import DraconfError


def resolve_target(args) -> None:
    """``--target`` from what was given: a kubeconfig or context alone means that kubeconfig's
    cluster; naming one with another target is a contradiction, said before anything starts.

    >>> import argparse
    >>> a = argparse.Namespace(target=None, kubeconfig="kc", context=None); resolve_target(a); a.target
    'kubeconfig'
    >>> a = argparse.Namespace(target=None, kubeconfig=None, context=None); resolve_target(a); a.target
    'testbed'
    >>> resolve_target(argparse.Namespace(target="testbed", kubeconfig="kc", context=None))
    Traceback (most recent call last):
    ...
    draconf.errors.DraconfError: --kubeconfig names a cluster of its own; --target testbed is the embedded test bed: give one or the other
    """
    named = "--kubeconfig" if args.kubeconfig else "--context" if args.context else None
    if args.target is None:
        args.target = "kubeconfig" if named else "testbed"
    elif named and args.target in ("testbed", "kind"):
        what = "the embedded test bed" if args.target == "testbed" else "a kind cluster made for the run"
        raise DraconfError(f"{named} names a cluster of its own; --target {args.target} is {what}: "
                           "give one or the other")


def plugin_args(args) -> list[str]:
    """The run's own options as the pytest plugin names them (``--draconf-*``: no other plugin's
    option, pytest-kind's ``--kubeconfig`` say, can take them).

    >>> import argparse
    >>> plugin_args(argparse.Namespace(target="kubeconfig", profile="nvidia", testbed_name="default",
    ...     kubeconfig="kc", context="staging", image=None, keep_on_failure=False, all_models=False,
    ...     no_preflight_gate=False, expect_feature=["mig"], waive_feature=[]))
    ['--draconf-target=kubeconfig', '--draconf-profile=nvidia', '--draconf-testbed-name=default', '--draconf-kubeconfig=kc', '--draconf-context=staging', '--draconf-expect-feature=mig']
    """
    out = [f"--draconf-target={args.target}", f"--draconf-profile={args.profile}",
           f"--draconf-testbed-name={args.testbed_name}"]
    for name in ("kubeconfig", "context", "image"):
        if getattr(args, name, None):
            out.append(f"--draconf-{name}={getattr(args, name)}")
    for name in ("keep_on_failure", "all_models", "every_node", "every_gpu", "no_preflight_gate"):
        if getattr(args, name, False):
            out.append("--draconf-" + name.replace("_", "-"))
    if getattr(args, "sweep_max_gpus", None):
        out.append(f"--draconf-sweep-max-gpus={args.sweep_max_gpus}")
    for name in ("expect_feature", "waive_feature", "target_limit"):
        out += [f"--draconf-{name.replace('_', '-')}={v}" for v in getattr(args, name, None) or []]
    return out


#: pytest options ``draconf run`` sets itself (where the reports go): given again, pytest would
#: write some reports where the run does not look for them.
REPORT_OPTIONS = ("--junitxml", "--junit-xml", "--alluredir", "--log-file", "--draconf-reports")


def refuse_reserved(pytest_args: list[str], own_options: Iterable[str] = ()) -> None:
    """Bad input: an option the run hands to pytest itself, given again among the arguments
    for pytest (the later one wins there, so ``--draconf-kubeconfig=F`` would send the run to
    another cluster than the one it printed; ``--junitxml`` would split the reports), or one of
    ``draconf run``'s own options (``own_options``) given after ``--``, which hands it to pytest,
    where a plugin's option of that name takes it silently (pytest-kind's ``--kubeconfig``,
    pytest-profiling's ``--profile``) or pytest refuses it.  Said with draconf's own flag for it.

    >>> refuse_reserved(["-k", "mig", "-x"], own_options=["--kubeconfig"])
    >>> refuse_reserved(["--draconf-kubeconfig=other"])
    Traceback (most recent call last):
    ...
    draconf.errors.DraconfError: --draconf-kubeconfig is draconf run's own option for pytest: give --kubeconfig instead
    >>> refuse_reserved(["--junitxml", "x.xml"])
    Traceback (most recent call last):
    ...
    draconf.errors.DraconfError: --junitxml is set by draconf run (the reports go together): give --reports DIR instead
    >>> refuse_reserved(["--", "--kubeconfig=F"], own_options=["--kubeconfig", "--context"])
    Traceback (most recent call last):
    ...
    draconf.errors.DraconfError: --kubeconfig is an option of draconf run, not pytest's: give it before `--` (after it, it goes to pytest, where a plugin may take it)
    """
    own = set(own_options)
    for arg in pytest_args:
        name = arg.split("=", 1)[0]
        if name in REPORT_OPTIONS:
            raise DraconfError(f"{name} is set by draconf run (the reports go together): give --reports DIR instead")
        if name.startswith("--draconf-"):
            raise DraconfError(f"{name} is draconf run's own option for pytest: give "
                               f"--{name.removeprefix('--draconf-')} instead")
        if name in own:
            raise DraconfError(f"{name} is an option of draconf run, not pytest's: give it before `--` "
                               "(after it, it goes to pytest, where a plugin may take it)")


def own_options(parser) -> tuple[str, ...]:
    """Every option string of ``draconf run``'s parser but its help: what must not reach pytest.

    >>> import argparse
    >>> p = argparse.ArgumentParser(); _ = p.add_argument("--kubeconfig"); _ = p.add_argument("-k", "--keep")
    >>> own_options(p)
    ('--kubeconfig', '-k', '--keep')
    """
    return tuple(option for action in parser._actions if not isinstance(action, argparse._HelpAction)
                 for option in action.option_strings)


def check_selection(base: list[str], pytest_args: list[str], judge_selection: bool = True) -> None:
    """What pytest makes of the arguments, before any cluster is touched: an option it does not
    know (``-n 4`` without pytest-xdist), or a selection that collects nothing, is bad input
    said in one line, with no bed started and no report written.  A collection in a process of
    its own (a second session in this one would see this one's imports): about a second."""
    parallel = any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in pytest_args)
    # -n N is checked (pytest-xdist must be there), but the collection is not spread over N
    # workers: a last -n 0 wins.
    argv = [sys.executable, "-m", "pytest", *base, "--collect-only", "-q", *pytest_args,
            *(["-n", "0"] if parallel else [])]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=os.getcwd())
    if done.returncode == 4:  # pytest's usage error
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines()
                if line.strip() and not line.startswith(("usage:", "ERROR: usage:", "  "))]
        refused = " ".join(said[-2:] or ["(no message)"])
        if parallel:
            refused = refused.replace(" -n 0", "")  # ours, not the user's
        xdist_missing = parallel and re.search(r"unrecognized arguments:.*(?:^|\s)(?:-n|--numprocesses)", refused)
        raise DraconfError("pytest refuses the arguments: " + refused
                           + ("; -n needs pytest-xdist: pip install pytest-xdist" if xdist_missing else ""))
    if done.returncode == 5 and judge_selection:  # (what --every-node adds is known only then)
        nothing = DraconfError("no tests were selected; check the -k/-m arguments and test paths")
        nothing.exit_code = 1  # as documented: a run that checks nothing fails
        raise nothing


def bed_limits(bed) -> list[str]:
    """``FEATURE=WHY`` for what the bed's simulated GPUs cannot have (``--draconf-target-limit``):
    a bed of NVIDIA's own driver runs over NVIDIA's mock NVML, which has no MIG and raises no
    Xid to the release's health monitor.

    >>> from types import SimpleNamespace
    >>> bed = lambda driver: SimpleNamespace(state=lambda: {"driver": driver})
    >>> [limit.split("=")[0] for limit in bed_limits(bed("nvidia-v0.4.0"))], bed_limits(bed("nvidia"))
    (['mig', 'device-taints'], [])
    """
    state = bed.state() or {}
    if str(state.get("driver", "")).startswith("nvidia-v"):
        from draconf.testbed.upstream_nvidia import installed_release, mock_nvml_limits
        return [f"{feature}={why}" for feature, why in mock_nvml_limits(installed_release(state)).items()]
    return []


def bed_workload_image(bed) -> str | None:
    """The image the workloads need on the embedded bed when not the profile's: NVIDIA's own
    driver (``--driver nvidia-v*``) injects a glibc nvidia-smi, which the static busybox
    image cannot run, so those beds have a busybox with glibc (None: the profile's)."""
    state = bed.state() or {}
    if str(state.get("driver", "")).startswith("nvidia-v"):
        from draconf.testbed.upstream_nvidia import WORKLOAD_GLIBC_REF
        return WORKLOAD_GLIBC_REF
    return None
