"""Polling waits that fail fast on terminal states and say what they last saw.

Every wait polls (list/get, never a bare watch) with tenacity.  Transient API trouble (429,
5xx, a dropped connection) is retried; anything else (RBAC denial, validation) is raised at
once.  A ``verdict`` callback turns a terminal state (say, an unschedulable pod) into an
immediate failure instead of a timeout.

>>> n = iter(range(10))
>>> wait_until("a number above 2", lambda: next(n), lambda v: v > 2, timeout=5, interval=0.01)
3
>>> wait_until("never", lambda: 0, lambda v: False, timeout=0.05, interval=0.01,
...            describe=lambda v: f"value {v}")
Traceback (most recent call last):
...
draconf.waits.WaitTimeout: timed out after 0.05s waiting for never; last observed: value 0
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException
from tenacity import (RetryError, Retrying, retry_if_exception, retry_if_result, stop_after_delay, wait_exponential,
                      wait_fixed)

log = logging.getLogger("draconf.wait")
T = TypeVar("T")
TRANSIENT_STATUS = {429, 500, 502, 503, 504}


class Verdict(str):
    """What a wait's ``verdict`` callback returns to end it: the sentence, and its cause as data
    (``kind``: what kind of reason it is, e.g. draconf.startup.PREPARE_REFUSED; ``answers``: the
    API server's answers behind it), which :class:`TerminalState` then carries, so that no
    caller reads the kind back out of the words.  A plain ``str`` is a verdict without a kind.

    >>> v = Verdict("pod p cannot pull its image", kind="image-pull")
    >>> v, v.kind, Verdict("x").answers
    ('pod p cannot pull its image', 'image-pull', ())
    """

    kind: str | None
    answers: tuple

    def __new__(cls, message: str, kind: str | None = None, answers: tuple = ()):
        verdict = super().__new__(cls, message)
        verdict.kind, verdict.answers = kind, tuple(answers)
        return verdict


class WaitFailed(AssertionError):
    """A wait ended without the expected state; the cluster failed the check.

    ``code``: the diagnosis code of the cause where the wait read it itself (a stalled
    control plane), else None and the diagnosis reads the cluster."""

    code: str | None = None

    def __init__(self, message: str, last_observed: str = ""):
        super().__init__(message)
        self.last_observed = last_observed


class WaitTimeout(WaitFailed):
    """No definitive signal before the deadline."""


class TerminalState(WaitFailed):
    """The observed state can no longer turn into the expected one; ``kind`` and ``answers``
    are the cause the wait's verdict gave (:class:`Verdict`), None and () if it gave none."""

    def __init__(self, message: str, last_observed: str = "", kind: str | None = None, answers: tuple = ()):
        super().__init__(message, last_observed)
        self.kind = kind
        self.answers = tuple(answers)


class ControlPlaneStalled(TerminalState):
    """Nothing in the control plane acted for a bounded time while the API server answered:
    ``code`` is ``scheduler-unavailable`` or ``controller-manager-unavailable``, ``reason`` what
    was observed.  The run's breaker (draconf.pytest_plugin) gives every later workload no
    verdict with this cause."""

    code: str

    def __init__(self, code: str, reason: str, last_observed: str = ""):
        super().__init__(f"[{code}] {reason}", last_observed)
        self.code = code
        self.reason = reason


class Cancelled(BaseException):
    """The wait's caller gave it up (the run was interrupted: Ctrl-C, SIGTERM): no verdict of
    any kind.  A BaseException, as KeyboardInterrupt is, so that no check takes it for the
    cluster's answer."""


_cancel = threading.local()


@contextmanager
def cancelled_by(event: threading.Event) -> Iterator[None]:
    """Within this block, every wait of this thread raises :class:`Cancelled` at its next poll
    once ``event`` is set.  The fleet sweep's threads wait so: an interrupted run does not sit
    out their timeouts before it can clean up and exit.

    >>> stop = threading.Event(); stop.set()
    >>> with cancelled_by(stop):
    ...     wait_until("never", lambda: 0, lambda v: False, timeout=60)
    Traceback (most recent call last):
    ...
    draconf.waits.Cancelled: given up waiting for never: the run was interrupted
    """
    before = getattr(_cancel, "event", None)
    _cancel.event = event
    try:
        yield
    finally:
        _cancel.event = before


def _given_up(what: str) -> None:
    event = getattr(_cancel, "event", None)
    if event is not None and event.is_set():
        raise Cancelled(f"given up waiting for {what}: the run was interrupted")


def is_transient(err: BaseException) -> bool:
    """True for errors worth retrying: throttling, server errors and dropped connections."""
    if isinstance(err, ApiException):
        return err.status in TRANSIENT_STATUS or err.status == 0
    return isinstance(err, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


def retrying(timeout: float = 30, interval: float = 0.5) -> Retrying:
    """A tenacity policy for single API calls: retry transient errors only."""
    return Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(interval),
                    retry=retry_if_exception(is_transient), reraise=True)


def call(fn: Callable[..., T], *args, timeout: float = 30, **kwargs) -> T:
    """``fn(*args, **kwargs)``, retried through transient API errors."""
    return retrying(timeout)(fn, *args, **kwargs)


def adaptive(interval: float):
    """The wait between polls: ``interval / 10``, doubling up to ``interval``.

    >>> from tenacity import RetryCallState
    >>> policy, state = adaptive(0.5), RetryCallState(None, None, (), {})
    >>> waits = []
    >>> for n in range(1, 7):
    ...     state.attempt_number = n
    ...     waits.append(round(policy(state), 3))
    >>> waits
    [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
    """
    return wait_exponential(multiplier=interval / 10, max=interval)


def wait_until(what: str, observe: Callable[[], T], ready: Callable[[T], bool], *, timeout: float,
               describe: Callable[[T], str] = str, verdict: Callable[[T], str | Verdict | None] | None = None,
               interval: float = 0.5, progress_every: float = 15,
               progress: Callable[[str], None] | None = None,
               confirm: Callable[[], T] | None = None) -> T:
    """Poll ``observe`` until ``ready(state)``; return that state.

    Polls adapt: the first comes ``interval / 10`` after the start, each later one waits twice
    as long, up to ``interval`` (0.05, 0.1, 0.2, 0.4, 0.5, 0.5 s ... by default).  Most of what
    the suite waits for happens within 0.01-0.3 s, and a fixed 0.5 s poll put up to half a
    second between an event and its verdict.

    Raises :class:`TerminalState` as soon as ``verdict(state)`` returns a message (with its
    cause, where the message is a :class:`Verdict`), and
    :class:`WaitTimeout` (with ``describe`` of the last state) when ``timeout`` runs out.
    Every ``progress_every`` seconds a line saying what it still waits for goes to
    ``progress`` (default: the ``draconf.wait`` logger at INFO).

    ``confirm``: where ``observe`` reads a copy that may lag (draconf.watched), the server's
    own state.  No verdict and no timeout comes from the copy: before either, ``confirm()`` is
    read, and the wait ends as that state says (ready, its own verdict, or the timeout).
    """
    started = time.monotonic()
    last: list = []
    next_progress = [started + progress_every]

    def judged(state) -> str | Verdict | None:
        return verdict(state) if verdict is not None and not ready(state) else None

    def attempt():
        _given_up(what)
        state = observe()
        last[:] = [state]
        try:
            message = judged(state)
        except TerminalState:
            if confirm is None:
                raise
            message = "the copy's verdict"  # read again from the server, below
        if message and confirm is not None:
            state = confirm()
            last[:] = [state]
            message = judged(state)  # the server's state: ready (None), or its verdict (may raise)
        if message:
            raise TerminalState(f"{what}: {message}", describe(state), kind=getattr(message, "kind", None),
                                answers=getattr(message, "answers", ()))
        now = time.monotonic()
        if now >= next_progress[0]:
            next_progress[0] = now + progress_every
            (progress or log.info)(f"still waiting ({now - started:.0f}s) for {what}; now: {describe(state)}")
        return state

    policy = Retrying(stop=stop_after_delay(timeout), wait=adaptive(interval),
                      retry=retry_if_result(lambda s: not ready(s)) | retry_if_exception(is_transient))
    try:
        return policy(attempt)
    except RetryError as err:
        outcome = err.last_attempt
        if confirm is not None and not outcome.failed:
            state = confirm()
            if ready(state):
                return state
            last[:] = [state]
        if outcome.failed:
            seen = f"API error {outcome.exception()}"
        else:
            seen = describe(last[0]) if last else "nothing"
        raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}; last observed: {seen}",
                          seen) from None
