"""A run-wide breaker for blanket admission refusals: once one policy or webhook has refused the
suite's objects of a kind twice, the rest of the run does not try that kind again.

An admin's ValidatingAdmissionPolicy or webhook that refuses, say, every ResourceClaim in the
suite's namespaces fails the first checks that create one (``admission-denied``, naming it);
every later check would only be refused the same way, one after another.  After
:data:`TRIES` refusals of a kind by the same denier, :func:`check` turns a create of that kind
(or of objects that make one: a pod with a claim template makes a ResourceClaim, a Deployment
or Job makes pods) into a no-verdict at once, naming the denier and quoting its message, as the
stalled-control-plane breaker does for a scheduler that never acts.

Refusals by a ResourceQuota are not counted (the quota checks refuse by design, per namespace);
only policies and webhooks, which apply cluster-wide.  Under pytest-xdist every worker of the
run appends to one file (``DRACONF_REFUSALS_FILE``, made by the controller), so a refusal one
worker met counts for all.

>>> book = Refusals()
>>> denial = ("ResourceClaim", "ValidatingAdmissionPolicy 'no-claims' (binding 'b')", "... denied request: no")
>>> book.record(*denial); book.blocking({"ResourceClaim"}) is None
True
>>> book.record(*denial); book.blocking({"Pod", "ResourceClaim"})[0]
"ValidatingAdmissionPolicy 'no-claims' (binding 'b')"
>>> book.record("Pod", "ResourceQuota gpu-quota", "exceeded quota"); book.blocking({"Pod"}) is None
True
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from draconf.errors import NoVerdict

#: Refusals by one denier of one kind after which the run stops creating that kind.
TRIES = 2
#: The file all pytest-xdist workers of a run share (set by the controller).
FILE_ENV = "DRACONF_REFUSALS_FILE"
#: What a denier named by :func:`draconf.admission.denial_in_text` must start with to count.
CLUSTER_WIDE = ("ValidatingAdmissionPolicy", "admission webhook")
#: Controllers make these of what the suite creates.
_MAKES_PODS = {"Deployment", "ReplicaSet", "Job", "StatefulSet", "DaemonSet"}


class Refusals:
    """The refusals this run met: (kind, denier) -> count, with the last message of each."""

    def __init__(self, path: str | None = None):
        self.path = Path(path) if path else None
        self.counts: Counter = Counter()
        self.messages: dict[tuple[str, str], str] = {}

    def record(self, kind: str, denier: str | None, message: str) -> None:
        if not denier or not denier.startswith(CLUSTER_WIDE):
            return
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as out:  # one short line: an atomic append
                out.write(json.dumps([kind, denier, message[:600]]) + "\n")
        else:
            self.counts[(kind, denier)] += 1
            self.messages[(kind, denier)] = message

    def _read(self) -> None:
        if self.path is None or not self.path.is_file():
            return
        self.counts, self.messages = Counter(), {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                kind, denier, message = json.loads(line)
            except ValueError:
                continue  # being written
            self.counts[(kind, denier)] += 1
            self.messages[(kind, denier)] = message

    def blocking(self, kinds: set[str]) -> tuple[str, str, int, str] | None:
        """(denier, kind, refusals, last message) for a kind of ``kinds`` refused TRIES times."""
        self._read()
        for (kind, denier), count in sorted(self.counts.items()):
            if kind in kinds and count >= TRIES:
                return denier, kind, count, self.messages[(kind, denier)]
        return None


_BOOK: Refusals | None = None


def book() -> Refusals:
    """This process's record (the run's shared file under pytest-xdist)."""
    global _BOOK
    path = os.environ.get(FILE_ENV)
    if _BOOK is None or (str(_BOOK.path) if _BOOK.path else None) != path:
        _BOOK = Refusals(path)
    return _BOOK


def kinds_made_by(docs: list[dict]) -> set[str]:
    """The kinds creating ``docs`` makes: theirs, and what controllers make of them.

    >>> pod = {"kind": "Pod", "spec": {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}}
    >>> sorted(kinds_made_by([{"kind": "ResourceClaimTemplate"}, pod]))
    ['Pod', 'ResourceClaim', 'ResourceClaimTemplate']
    >>> sorted(kinds_made_by([{"kind": "Job", "spec": {"template": {"spec": {}}}}]))
    ['Job', 'Pod']
    """
    kinds = set()
    for doc in docs:
        kinds.add(doc["kind"])
        spec = doc.get("spec") or {}
        if doc["kind"] in _MAKES_PODS:
            kinds.add("Pod")
            spec = ((spec.get("template") or {}).get("spec")) or {}
        if any(c.get("resourceClaimTemplateName") for c in spec.get("resourceClaims") or []):
            kinds.add("ResourceClaim")
    return kinds


def check(docs: list[dict]) -> None:
    """:class:`NoVerdict` when the run has stopped creating a kind ``docs`` would make."""
    blocked = book().blocking(kinds_made_by(docs))
    if blocked:
        denier, kind, count, message = blocked
        raise NoVerdict(f"not tried: {denier} has refused the suite's {kind} objects {count} times in this "
                        f"run: {message}", code="admission-denied")
