"""What the API server answered when it turned a request away: the suite's own (a create refused
by admission, a 403, a 429 that stood after the retries), or a controller's made for the suite's
workload (seen in an event or a pod's condition).  Kept as data on the exception a check raises
(:func:`carried_by`), so that a diagnosis reads the server's answer itself
(:class:`draconf.diagnosis.facts.Failure`), never the suite's sentence around it.

>>> from kubernetes.client.exceptions import ApiException
>>> answer = ServerAnswer.of(ApiException(status=429, reason="Too Many Requests"))
>>> answer.throttled, answer.forbidden()
(True, [])
>>> err = failure("the workload never started: ...", [answer])
>>> carried_by(err) == (answer,)
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from kubernetes.client.exceptions import ApiException

from draconf.admission import FORBIDDEN, AdmissionDenied, server_message
from draconf.errors import CheckFailed

#: Statuses of a server too busy to serve the request (what kube.API_RETRY retries), kept when
#: they stood after the retries.
BUSY_STATUSES = frozenset({429, 502, 503, 504})

_HANDSHAKE = re.compile(r"Handshake status (\d{3})")


@dataclass(frozen=True)
class ServerAnswer:
    """One answer of the API server that turned a request away.

    ``status`` is the HTTP status of the suite's own request, or None for a controller's request
    the suite saw refused (``via`` then says where: the event's reason or the pod's condition).
    ``message`` is the server's own message (a Status body's ``message``), not the suite's."""
    status: int | None
    message: str
    reason: str = ""
    via: str = ""

    @classmethod
    def of(cls, err) -> "ServerAnswer":
        """The answer an ApiException carries.  An exec the server refused comes as status 0
        with the websocket handshake's status and body in the reason (kubernetes.stream).

        >>> from kubernetes.client.exceptions import ApiException
        >>> ServerAnswer.of(ApiException(status=0, reason="Handshake status 403 Forbidden -+-+- {} -+-+- b'x'")).status
        403
        """
        status, reason = getattr(err, "status", None), str(getattr(err, "reason", "") or "")
        if status == 0 and (shook := _HANDSHAKE.match(reason)):
            return cls(int(shook.group(1)), reason, "websocket handshake")
        return cls(status, server_message(err) if getattr(err, "body", None) else "", reason)

    @property
    def direct(self) -> bool:
        """The suite's own request (not a controller's, seen in an event)."""
        return self.status is not None

    @property
    def throttled(self) -> bool:
        return self.status in BUSY_STATUSES

    def forbidden(self) -> list[tuple[str, str, str, str]]:
        """``(user, verb, resource, group)`` the credentials may not do, from a 403's message.

        >>> ServerAnswer(403, 'pods is forbidden: User "ci" cannot create resource "pods" in API group ""').forbidden()
        [('ci', 'create', 'pods', '')]
        """
        if self.status not in (403, None):
            return []
        return FORBIDDEN.findall(self.message)

    def __str__(self) -> str:
        head = f"{self.status} {self.reason}".strip() if self.direct else self.via
        return f"{head}: {self.message}" if self.message else head


def carried_by(error: BaseException | None) -> tuple[ServerAnswer, ...]:
    """Every server answer ``error`` carries: an ApiException or AdmissionDenied itself, the ``answers`` a check
    attached (:func:`failure`), and those of the exceptions it was raised from or while handling
    (``__cause__``, ``__context__``), in that order, each once."""
    found: list[ServerAnswer] = []
    seen: set[int] = set()
    stack = [error]
    while stack:
        err = stack.pop(0)
        if err is None or id(err) in seen or len(seen) > 20:
            continue
        seen.add(id(err))
        if isinstance(err, ApiException):
            found.append(ServerAnswer.of(err))
        elif isinstance(err, AdmissionDenied):
            found.append(ServerAnswer(err.status, err.server_message))
        found.extend(a for a in getattr(err, "answers", ()) or () if isinstance(a, ServerAnswer))
        stack += [err.__cause__, err.__context__]
    return tuple(dict.fromkeys(found))


def failure(message: str, answers: Iterable[ServerAnswer]) -> BaseException:
    """A check's failure (pytest's, no traceback) that carries the server's answers behind it."""
    return CheckFailed(message, answers=tuple(answers))
