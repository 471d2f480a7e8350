"""The ``draconf`` command.

    draconf testbed build            build the pinned control plane into the cache
    draconf testbed up [--fault F]   start the embedded test bed (idempotent)
    draconf testbed status | env     where it is and how to point kubectl at it
    draconf testbed down             stop it and remove its state
"""

from __future__ import annotations

import argparse
import json
import sys

from draconf.errors import DraconfError


def _bed(args):
    from draconf.testbed.cluster import Testbed
    return Testbed.named(args.name)


def cmd_testbed_build(args) -> int:
    from draconf.testbed import build
    print(build.ensure_built(force=args.force))
    return 0


def cmd_testbed_up(args) -> int:
    from draconf.testbed import inventory
    if args.inventory and (args.nodes or args.gpus_per_node):
        raise DraconfError("give either --inventory or --nodes/--gpus-per-node, not both")
    if args.nodes or args.gpus_per_node:
        inv = inventory.uniform(args.nodes or 1, args.gpus_per_node or 8)
    else:
        inv = inventory.load(args.inventory or inventory.DEFAULT_INVENTORY)
    bed = _bed(args)
    bed.up(inv, args.fault, apiserver_port=args.port, timeout=args.timeout)
    print(f"export KUBECONFIG={bed.kubeconfig}")
    return 0


def cmd_testbed_down(args) -> int:
    if not _bed(args).down():
        print(f"test bed {args.name!r} is not up; nothing to do")
    return 0


def cmd_testbed_status(args) -> int:
    status = _bed(args).status()
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        for key, value in status.items():
            if key == "components":
                value = ", ".join(f"{c} {'running' if ok else 'STOPPED'}" for c, ok in value.items())
            print(f"{key:>11}: {value}")
    return 0 if status["state"] == "up" else 1


def cmd_testbed_env(args) -> int:
    bed = _bed(args)
    if not bed.is_up:
        raise DraconfError(f"test bed {args.name!r} is not up; start it with `draconf testbed up`")
    print(f"export KUBECONFIG={bed.kubeconfig}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="draconf", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    testbed = sub.add_parser("testbed", help="the embedded test bed (real control plane, simulated GPU nodes)")
    tsub = testbed.add_subparsers(dest="action", required=True)

    def with_name(p):
        p.add_argument("--name", default="default", help="which test bed (default: %(default)s)")
        return p

    p = tsub.add_parser("build", help="build etcd, kube-* and kwok from Go modules into the cache")
    p.add_argument("--force", action="store_true", help="rebuild even if the cache is current")
    p.set_defaults(func=cmd_testbed_build)

    from draconf.testbed.faults import FAULTS
    p = with_name(tsub.add_parser("up", help="start the test bed, or confirm it is up"))
    p.add_argument("--inventory", help="fleet YAML file (default: the mixed H100/A100/H200 fleet)")
    p.add_argument("--nodes", type=int, help="build a uniform fleet of this many GPU nodes")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node of the uniform fleet (default 8)")
    p.add_argument("--fault", action="append", default=[], choices=sorted(FAULTS), metavar="NAME",
                   help="start the bed broken in one way (repeatable): " + ", ".join(FAULTS))
    p.add_argument("--port", type=int, help="kube-apiserver port on 127.0.0.1 (default: a free one)")
    p.add_argument("--timeout", type=float, default=180, help="seconds to wait for readiness")
    p.set_defaults(func=cmd_testbed_up)

    p = with_name(tsub.add_parser("down", help="stop every process of the bed and remove its state"))
    p.set_defaults(func=cmd_testbed_down)
    p = with_name(tsub.add_parser("status", help="show whether the bed is up and where"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_testbed_status)
    p = with_name(tsub.add_parser("env", help="print `export KUBECONFIG=...` for the bed"))
    p.set_defaults(func=cmd_testbed_env)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except DraconfError as err:
        print(f"draconf: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("draconf: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
