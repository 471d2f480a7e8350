"""Reading the API for a check, with API trouble turned into a verdict: :func:`read` raises
:class:`Inconclusive` naming the missing RBAC permission (403), rejected credentials (401), an
untrusted certificate or an unreachable server, never a traceback; an API server's answer goes
with it as data (:class:`draconf.answers.ServerAnswer`), for the code of the row and its
diagnosis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

import urllib3
from kubernetes.client.exceptions import ApiException

from draconf.answers import ServerAnswer
from draconf.errors import server_message

#: Seconds any single preflight request may take (an unroutable server must not hang the run).
REQUEST_TIMEOUT = 20


class Inconclusive(Exception):
    """Raised while reading: the check cannot reach a verdict; ``str(err)`` says why.
    ``answers``: the API server's answers that turned the reads away (what
    :func:`draconf.answers.carried_by`, and so the diagnosis, reads of it)."""

    def __init__(self, summary: str, evidence: Mapping[str, str] | None = None,
                 unreachable: bool = False, answers: Iterable[ServerAnswer] = ()):
        super().__init__(summary)
        self.summary = summary
        self.evidence = dict(evidence or {})
        self.unreachable = unreachable
        self.answers = tuple(answers)


@dataclass(frozen=True)
class Access:
    """What a read needs from RBAC: ``verb`` on ``resource`` in ``group`` (``""`` = core)."""

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None

    def __str__(self) -> str:
        qualified = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f" in namespace {self.namespace}" if self.namespace else (
            " in all namespaces" if self.verb == "list" and self.resource == "pods" else "")
        return f"`{self.verb}` on {qualified}{where}"


def forbidden_summary(access: Access, server_message: str = "") -> str:
    """The operator-facing line for a 403.

    >>> forbidden_summary(Access("list", "resourceslices", "resource.k8s.io"))
    'forbidden: the credentials in use lack `list` on resourceslices.resource.k8s.io; grant it (e.g. with a ClusterRole bound to this user) and rerun'
    """
    line = (f"forbidden: the credentials in use lack {access}; grant it (e.g. with a "
            f"{'Role' if access.namespace else 'ClusterRole'} bound to this user) and rerun")
    return f"{line} (server: {server_message})" if server_message else line


def read(access: Access, call: Callable, *args, not_found_ok: bool = False,
         request_timeout: float | tuple[float, float] = REQUEST_TIMEOUT, **kwargs):
    """``call(*args, **kwargs)`` with a request timeout; API trouble becomes :class:`Inconclusive`.

    A 404 returns None when ``not_found_ok``; any other 404 and any non-403 error status
    also become Inconclusive (the check could not read what it needs), carrying the answer.

    >>> def busy(_request_timeout=None):
    ...     raise ApiException(status=429, reason="Too Many Requests")
    >>> try:
    ...     read(Access("list", "nodes"), busy)
    ... except Inconclusive as err:
    ...     print(err.summary); print(err.answers[0].throttled)
    the API server answered 429 Too Many Requests to `list` on nodes: 429 Too Many Requests
    True
    """
    try:
        return call(*args, _request_timeout=request_timeout, **kwargs)
    except ApiException as err:
        if err.status == 404 and not_found_ok:
            return None
        message = server_message(err)
        answers = (ServerAnswer.of(err),)
        if err.status == 403:
            raise Inconclusive(forbidden_summary(access), {"403 Forbidden": message}, answers=answers) from None
        if err.status == 401:
            raise Inconclusive("unauthorized: the API server rejected the credentials in the "
                               "kubeconfig (expired token or certificate?); refresh them and rerun",
                               {"401 Unauthorized": message}, unreachable=True, answers=answers) from None
        raise Inconclusive(f"the API server answered {err.status} {err.reason} to {access}: "
                           f"{message}", {f"{err.status} {err.reason}": message}, answers=answers) from None
    except (urllib3.exceptions.HTTPError, OSError) as err:
        host = _host_of(call)
        if "CERTIFICATE_VERIFY_FAILED" in str(err) or isinstance(
                getattr(err, "reason", None), urllib3.exceptions.SSLError):
            raise Inconclusive(f"the API server{' at ' + host if host else ''} presented a TLS "
                               f"certificate the kubeconfig does not trust ({_reason(err)}); "
                               "check the server address and certificate-authority-data in the "
                               "kubeconfig", {"TLS error": str(err)}, unreachable=True) from None
        raise Inconclusive(f"cannot reach the API server{' at ' + host if host else ''}: "
                           f"{_reason(err)}; check the kubeconfig's server address, the network "
                           "and that the control plane is up", {"connection error": str(err)},
                           unreachable=True) from None


def _host_of(call) -> str:
    api_client = getattr(getattr(call, "__self__", None), "api_client", None)
    return getattr(getattr(api_client, "configuration", None), "host", "") or ""


def _reason(err: Exception) -> str:
    reason = getattr(err, "reason", None) or err
    text = str(reason)
    # urllib3 wraps the OS error: "<...NewConnectionError object at 0x..>: Failed to establish
    # a new connection: [Errno 111] Connection refused" -> keep the part after the repr.
    return text.split(">: ", 1)[-1]
