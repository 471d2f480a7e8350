"""``draconf testbed ...``: the embedded test bed's commands and their options (build, up,
upgrade, down, status, env); :mod:`draconf.cli` adds them to the ``draconf`` parser."""

from __future__ import annotations

import json

from draconf.errors import DraconfError


def bed_of(args):
    """The bed ``--name`` (or ``run --testbed-name``) names."""
    from draconf.testbed.cluster import Testbed
    return Testbed.named(getattr(args, "name", None) or args.testbed_name)


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
    if args.node_kind:
        inv = inventory.with_node_kind(inv, args.node_kind)
    bed = bed_of(args)
    bed.up(inv, args.fault, apiserver_port=args.port, timeout=args.timeout, driver=args.driver,
           upstream_sources=args.upstream_sources)
    print(f"export KUBECONFIG={bed.kubeconfig}")
    return 0


def cmd_testbed_upgrade(args) -> int:
    if args.driver:
        if args.driver_version or args.bad:
            raise DraconfError("--driver upgrades NVIDIA's released driver to another release; "
                               "--driver-version and --bad roll the simulated driver: give one or the other")
        from draconf.testbed import upstream_upgrade
        release = upstream_upgrade.upgrade(bed_of(args), args.driver, sources=args.upstream_sources,
                                           name_override=not args.without_name_override)
        print(f"test bed {args.name!r}: {release.module} {release.version} from its chart "
              f"{release.chart_name}, release {release.release_name} in {release.namespace}")
        return 0
    if args.without_name_override:
        raise DraconfError("--without-name-override is a mistake in upgrading NVIDIA's release: give it "
                           "with --driver")
    from draconf.testbed.upgrade import upgrade
    version = upgrade(bed_of(args), driver_version=args.driver_version, bad=args.bad)
    print(f"test bed {args.name!r}: driver upgraded to {version}"
          + (f" (bad upgrade: {args.bad})" if args.bad else ""))
    return 0


def cmd_testbed_down(args) -> int:
    if not bed_of(args).down():
        print(f"test bed {args.name!r} is not up; nothing to do")
    return 0


def cmd_testbed_status(args) -> int:
    status = bed_of(args).status()
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        for key, value in status.items():
            if key == "components":
                value = ", ".join(f"{c} {'running' if ok else 'STOPPED'}" for c, ok in value.items())
            print(f"{key:>11}: {value}")
    return 0 if status["state"] == "up" else 1


def cmd_testbed_env(args) -> int:
    bed = bed_of(args)
    if not bed.is_up:
        raise DraconfError(f"test bed {args.name!r} is not up; start it with `draconf testbed up`")
    print(f"export KUBECONFIG={bed.kubeconfig}")
    return 0


def add_commands(sub) -> None:
    """``testbed`` and its actions, as a subcommand of ``sub``."""
    testbed = sub.add_parser("testbed", help="the embedded test bed (real control plane, simulated GPU nodes)")
    tsub = testbed.add_subparsers(dest="action", required=True)

    def with_name(p):
        p.add_argument("--name", "--testbed-name", dest="name", default="default",
                       help="which test bed (default: %(default)s)")
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
    p.add_argument("--node-kind", choices=["real", "kwok"],
                   help="make every node of the fleet this kind (default: as the inventory says; "
                        "the default fleet's GPU nodes are real, --nodes fleets are kwok)")
    from draconf.testbed.upstream_nvidia import DRIVER_CHOICES, SOURCES_ENV
    p.add_argument("--driver", choices=["nvidia", "example", *DRIVER_CHOICES], default="nvidia",
                   help="the DRA driver: the simulated NVIDIA driver (default), dra-example-driver "
                        "installed from its own Helm chart on the real nodes, or NVIDIA's own release "
                        f"({', '.join(DRIVER_CHOICES)}) built from its source archive and installed from "
                        "its own chart on the real nodes, over NVIDIA's mock NVML")
    p.add_argument("--upstream-sources", metavar="DIR",
                   help=f"where the upstream source archives are, for --driver nvidia-v* (default: "
                        f"${SOURCES_ENV}, else ../shared/upstream beside the repository)")
    p.add_argument("--port", type=int, help="kube-apiserver port on 127.0.0.1 (default: a free one)")
    p.add_argument("--timeout", type=float, default=180, help="seconds to wait for readiness")
    p.set_defaults(func=cmd_testbed_up)

    from draconf.testbed.upgrade import BAD_UPGRADES
    p = with_name(tsub.add_parser(
        "upgrade", help="roll the simulated NVIDIA driver to a new version, as a chart upgrade "
                        "would (plugin pods restart, slices republished); on a bed of NVIDIA's "
                        "release, --driver upgrades it to a later release"))
    p.add_argument("--driver", choices=sorted(DRIVER_CHOICES), metavar="RELEASE",
                   help="on a `--driver nvidia-v25.12.0` bed: upgrade in place to this release "
                        f"({', '.join(sorted(DRIVER_CHOICES))}) as the release's "
                        "docs/upgrade.md says (new CRDs, helm upgrade with nameOverride)")
    p.add_argument("--without-name-override", action="store_true",
                   help="with --driver: the bad upgrade that guide warns of, without nameOverride (the "
                        "renamed chart's objects come beside the old ones, which are then deleted)")
    p.add_argument("--upstream-sources", metavar="DIR",
                   help=f"where the upstream source archives are (default: ${SOURCES_ENV}, else "
                        "../shared/upstream beside the repository)")
    p.add_argument("--driver-version", help="the new driver version (default: the next one)")
    p.add_argument("--bad", choices=sorted(BAD_UPGRADES), metavar="KIND",
                   help="a bad upgrade: " + "; ".join(f"{k}: {v}" for k, v in BAD_UPGRADES.items()))
    p.set_defaults(func=cmd_testbed_upgrade)

    p = with_name(tsub.add_parser("down", help="stop every process of the bed and remove its state"))
    p.set_defaults(func=cmd_testbed_down)
    p = with_name(tsub.add_parser("status", help="show whether the bed is up and where"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_testbed_status)
    p = with_name(tsub.add_parser("env", help="print `export KUBECONFIG=...` for the bed"))
    p.set_defaults(func=cmd_testbed_env)
