"""draconf.waits.wait_until's ``confirm``: a wait that reads a copy which may lag (the fleet
sweep's watch, draconf.watched) takes neither a verdict nor a timeout from the copy.

At 1,000 KWOK nodes the copy lagged the API server by 15 s and more: waits timed out on pods the
server had had Running for seconds.  Here the copy and the server are two plain functions, as
the two reads are in DeployedWorkload."""

from __future__ import annotations

import pytest

from draconf import waits


def stuck_copy():
    """A copy that never catches up: it shows the first state forever."""
    return 0


def test_a_timeout_on_the_copy_ends_ready_when_the_server_is():
    assert waits.wait_until("n > 3", stuck_copy, lambda n: n > 3, timeout=0.2, interval=0.01,
                            confirm=lambda: 5) == 5


def test_the_copys_verdict_is_not_taken_while_the_server_says_otherwise():
    stuck = lambda n: "stuck at 0" if n == 0 else None  # noqa: E731
    assert waits.wait_until("n > 3", stuck_copy, lambda n: n > 3, timeout=1, interval=0.01,
                            verdict=stuck, confirm=lambda: 7) == 7


def test_a_copys_terminal_state_raised_by_the_verdict_is_read_again_from_the_server():
    def stalled(n):
        if n == 0:
            raise waits.ControlPlaneStalled("scheduler-unavailable", "nothing bound the pod")
        return None
    assert waits.wait_until("n > 3", stuck_copy, lambda n: n > 3, timeout=1, interval=0.01,
                            verdict=stalled, confirm=lambda: 9) == 9


def test_the_servers_own_verdict_ends_the_wait():
    with pytest.raises(waits.TerminalState, match="stuck below 3"):
        waits.wait_until("n > 3", stuck_copy, lambda n: n > 3, timeout=1, interval=0.01,
                         verdict=lambda n: "stuck below 3" if n < 3 else None, confirm=lambda: 1)


def test_a_timeout_the_server_confirms_names_the_servers_state():
    with pytest.raises(waits.WaitTimeout, match="last observed: n=2"):
        waits.wait_until("n > 3", stuck_copy, lambda n: n > 3, timeout=0.1, interval=0.01,
                         confirm=lambda: 2, describe=lambda n: f"n={n}")
