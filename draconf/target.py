"""Which cluster a run is about: the embedded test bed, a kubeconfig's cluster or the pod's
ServiceAccount (``--draconf-target``, ``--draconf-kubeconfig``, ``--draconf-context``,
``--draconf-testbed-name``), and a connection to it."""

from __future__ import annotations

from draconf.errors import DraconfError
from draconf.kube import connect, connect_target


def run_target(config) -> str:
    """``--draconf-target``; a kubeconfig or context given alone means that kubeconfig's cluster."""
    target = config.getoption("draconf_target")
    if target == "testbed" and (config.getoption("draconf_kubeconfig") or config.getoption("draconf_context")):
        return "kubeconfig"
    return target


def target_api(config, start=None, down_hint: str = ""):
    """An API connection to the run's target (:func:`run_target`, ``--draconf-kubeconfig``,
    ``--draconf-context``, ``--draconf-testbed-name``).  A test bed that is down is started by
    ``start(bed)``; without ``start`` it is a :class:`DraconfError` naming it (``down_hint`` adds
    a way out)."""
    target = run_target(config)
    if target != "testbed":
        return connect_target(target, config.getoption("draconf_context"), config.getoption("draconf_kubeconfig"))
    from draconf.testbed.cluster import Testbed
    bed = Testbed.named(config.getoption("draconf_testbed_name"))
    if not bed.is_up:
        if start is None:
            raise DraconfError(f"test bed {bed.name!r} is not up (start it with `draconf testbed up`"
                               + (f", {down_hint}" if down_hint else "") + ")")
        start(bed)
    return connect(bed.kubeconfig)
