"""What the benchmarks that measure on a bed already up share: finding it."""

from __future__ import annotations


def running_bed(name: str):
    """The test bed ``name`` when it is up; else None, after saying how to start it."""
    from draconf.testbed.cluster import Testbed
    bed = Testbed.named(name)
    if not bed.is_up:
        print(f"test bed {name!r} is not up: `draconf testbed up --name {name}`")
        return None
    return bed
