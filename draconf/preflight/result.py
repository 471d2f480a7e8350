"""The verdict of one preflight check (:class:`CheckResult`), and how a check writes it: the
constructor its ``evaluate_*`` functions use, and the cut name lists of its summaries (its
tables come from :mod:`draconf.tables`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping

from draconf.answers import ServerAnswer

BLOCKING = "blocking"
INFO = "info"


@dataclass
class CheckResult:
    """The verdict of one check.

    ``ok`` is False both when the cluster fails the check and when the check could not be
    evaluated (``inconclusive``); ``diagnosis`` (a code of ``draconf.reporting.DIAGNOSES``) is
    set only for a definitive failure.
    """

    name: str
    ok: bool
    severity: str
    summary: str
    diagnosis: str | None = None
    evidence: dict[str, str] = field(default_factory=dict)
    #: the check could not reach a verdict (forbidden, unreachable, unexpected API answer).
    inconclusive: bool = False
    #: False when there was nothing to check (e.g. the GPUCluster CRD is not installed).
    applicable: bool = True
    #: the API server could not be used at all: unreachable, untrusted TLS certificate or
    #: credentials rejected (implies ``inconclusive``); run_all() stops asking after one.
    unreachable: bool = False
    #: the GPU nodes a failure is confined to (its plugin down there, no slices, devices
    #: lacking attributes); empty: it concerns the whole cluster.  See :mod:`draconf.nodescope`.
    nodes: tuple[str, ...] = ()
    #: the API server's answers that kept an inconclusive check from its verdict (a 403, a 429
    #: or 5xx that stood after the client's retries), as the server gave them.
    answers: tuple[ServerAnswer, ...] = ()

    def as_dict(self) -> dict:
        """Plain data (JSON), for sharing one reading between processes."""
        return {**self.__dict__, "nodes": list(self.nodes), "answers": [asdict(a) for a in self.answers]}

    @classmethod
    def from_dict(cls, data: dict) -> "CheckResult":
        """The result :meth:`as_dict` wrote.

        >>> r = CheckResult("kubelet-plugin", False, BLOCKING, "down on n1", "plugin-unhealthy", nodes=("n1",))
        >>> CheckResult.from_dict(r.as_dict()) == r
        True
        >>> r = CheckResult("resource-slices", False, BLOCKING, "busy", inconclusive=True,
        ...                 answers=(ServerAnswer(429, "slow down", "Too Many Requests"),))
        >>> CheckResult.from_dict(r.as_dict()) == r
        True
        """
        return cls(**{**data, "nodes": tuple(data.get("nodes") or ()),
                      "answers": tuple(ServerAnswer(**a) for a in data.get("answers") or ())})

    @property
    def no_verdict_code(self) -> str | None:
        """The diagnosis code of what kept an inconclusive check from its verdict, read from the
        server's answers: ``permission-denied`` for a 403 (forbidden, not slow),
        ``api-throttled`` for a 429 or 502/503/504 that stood after the client's retries (a
        busy server).  None for any other: the diagnosis reads the cluster.

        >>> busy = CheckResult("device-class", False, BLOCKING, "...", inconclusive=True,
        ...                    answers=(ServerAnswer(503, "", "Service Unavailable"),))
        >>> busy.no_verdict_code
        'api-throttled'
        >>> CheckResult("device-class", False, BLOCKING, "...", inconclusive=True,
        ...             answers=(ServerAnswer(500, "etcd broke", "Internal Server Error"),)).no_verdict_code
        """
        if not self.inconclusive:
            return None
        if any(a.status == 403 for a in self.answers):
            return "permission-denied"
        if any(a.throttled for a in self.answers):
            return "api-throttled"
        return None

    @property
    def blocking(self) -> bool:
        """A definitive failure of a blocking check: DRA workloads cannot work here."""
        return not self.ok and not self.inconclusive and self.severity == BLOCKING

    @property
    def status(self) -> str:
        """PASS, FAIL, WARN (a failed info check), INCONCLUSIVE or N/A."""
        if self.inconclusive:
            return "INCONCLUSIVE"
        if not self.applicable:
            return "N/A"
        if self.ok:
            return "PASS"
        return "FAIL" if self.severity == BLOCKING else "WARN"


def check_result(ok: bool, summary: str, diagnosis: str | None = None,
                 evidence: Mapping[str, str] | None = None, applicable: bool = True,
                 nodes: Iterable[str] = ()) -> CheckResult:
    # name and severity are filled in by @check.
    return CheckResult("", ok, BLOCKING, summary, None if ok else diagnosis, dict(evidence or {}),
                       applicable=applicable, nodes=() if ok else tuple(sorted(set(nodes))))


def name_list(items: Iterable[str], limit: int = 10) -> str:
    items = sorted(items)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
