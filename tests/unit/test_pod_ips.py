"""The KWOK plugin's pod IPs are handed out from several threads at once (its pool starts the
pods of a batch concurrently).  Unlocked, the first pass through the CIDR ran the hosts()
generator from two threads: "ValueError: generator already executing" in a pool future nobody
read, and the pod stayed Pending for good."""

from __future__ import annotations

import sys
import threading

from draconf.testbed.kwok_config import PodIPs


def test_pod_ips_are_handed_out_from_many_threads_without_error():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    ips, errors, seen = PodIPs("10.245.0.0/16"), [], []
    lock = threading.Lock()

    def hand_out():
        mine = []
        for _ in range(2000):
            try:
                mine.append(ips.next())
            except Exception as err:  # noqa: BLE001 - what the pool would have swallowed
                errors.append(repr(err))
        with lock:
            seen.extend(mine)

    try:
        threads = [threading.Thread(target=hand_out) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(before)
    assert errors == []
    assert len(set(seen)) == len(seen) == 16000  # each IP once: 16,000 of the CIDR's 65,534
