"""Selectors compiled from many threads at once, as the fleet sweep compiles one uuid selector
per GPU from its 80 workers: each must come out as written.  cel-python's parser is not safe
to run from two threads at once (unlocked, 10 of 4,800 expressions here came out holding another
thread's literal, and the sweep failed two healthy GPUs "does not satisfy the request's
selectors"), so draconf.cel compiles under a lock."""

from __future__ import annotations

import sys
import threading

from draconf import cel
from draconf.devices import Device


def test_selectors_compiled_from_many_threads_each_match_their_own_device():
    wrong: list[tuple[int, int, str]] = []

    def compile_and_judge(thread: int) -> None:
        for i in range(300):
            uuid = f"GPU-{thread:02d}{i:04d}-af21-0205-3959-d029512debd9"
            device = Device("gpu.nvidia.com", "n1", "gpu-0", "n1", {"gpu.nvidia.com/uuid": uuid})
            verdict = cel.evaluate(f"device.attributes['gpu.nvidia.com'].uuid in ['{uuid}']", device)
            if not verdict.matched:
                wrong.append((thread, i, str(verdict)))

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, as 80 busy workers do
    try:
        threads = [threading.Thread(target=compile_and_judge, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(before)
    assert wrong == []
