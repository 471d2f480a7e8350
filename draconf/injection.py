"""Is CDI injection right: what each container showed against what was allocated to it (pure).

:meth:`draconf.workload.DeployedWorkload.check_injection` reads the cluster (the devices
allocated to the claims each container lists, the profile's command run in it) into one
:class:`Seen` per container; :func:`judge` says whether they add up, with nothing read from the
cluster, so every branch is a unit test over recorded readings (tests/unit/test_injection.py).

A PASS needs at least one container that was allocated a GPU and shows exactly it: containers
that "expect no GPU and see none" show nothing about injection (an admission policy that
stripped the claims leaves only those), and a container whose expected GPUs cannot be named
(its claim has no allocation, the device is not published) leaves the check without a verdict.

>>> ok = Seen("p", "c", expected=["GPU-a"], seen=["GPU-a"], result=ExecResult("GPU 0: ... (UUID: GPU-a)", "", 0))
>>> judge([ok]).right
True
>>> wrong = Seen("p", "c", expected=["GPU-a"], seen=["GPU-b"], result=ExecResult("", "", 0))
>>> judge([wrong]).problems
["p/c sees ['GPU-b'], allocated ['GPU-a']; missing ['GPU-a']; not allocated to it ['GPU-b']"]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draconf.pods import ExecResult


class WrongInjection(AssertionError):
    """The injection check failed; ``allocated`` is what it found allocated to each container
    (``pod/container`` -> identities), for the diagnosis as data: a finished pod's generated
    claim is deleted, and with it the cluster's record of its GPU."""

    def __init__(self, message: str, allocated: dict[str, list[str]]):
        super().__init__(message)
        self.allocated = dict(allocated)


@dataclass(frozen=True)
class Seen:
    """One container: the identities it should see (``expected``; ``unknown`` says why some
    could not be named) and what the profile's command showed there (``seen``, ``result``;
    None when it was not run because ``unknown`` left nothing to compare with)."""
    pod: str
    container: str
    expected: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    result: ExecResult | None = None

    @property
    def who(self) -> str:
        return f"{self.pod}/{self.container}"


@dataclass
class Judgement:
    problems: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    #: containers whose expected GPUs could not be named: no verdict for them
    unjudged: list[str] = field(default_factory=list)
    #: containers allocated a GPU whose expected identities were named
    given_a_gpu: int = 0

    @property
    def right(self) -> bool:
        return not self.problems and not self.unjudged and self.given_a_gpu > 0

    @property
    def nothing_shown(self) -> bool:
        """No problem, nothing unjudged, and yet no container was allocated a GPU."""
        return not self.problems and not self.unjudged and self.given_a_gpu == 0


def judge(containers: list[Seen], shown: str = "nvidia-smi -L", list_format: bool = True) -> Judgement:
    """Every container against its allocation.  ``shown`` names the command (for the evidence);
    ``list_format``: the command's output is the identities themselves (``nvidia-smi -L``), so
    the evidence need not repeat what was parsed from it."""
    out = Judgement()
    for c in containers:
        if c.unknown:
            out.unjudged.append(f"{c.who}: {'; '.join(c.unknown)}")
            continue
        result = c.result or ExecResult("", "", None, "not run")
        out.given_a_gpu += bool(c.expected)
        parsed = "" if list_format else f"; sees {c.seen or 'no GPU'}"
        out.evidence.append(f"{c.who}: expected {c.expected or 'no GPU'}{parsed}; {shown}: {result.describe()}")
        if not c.expected:
            # No claim listed: the command must be absent or list nothing.
            if c.seen:
                out.problems.append(f"{c.who} lists no claim but sees {c.seen}")
            elif result.exit_code is None:
                out.problems.append(f"{c.who}: exec failed ({result.describe()})")
            continue
        if not result.succeeded and not c.seen:
            out.problems.append(f"{c.who} sees no GPU: {shown} {result.describe()} (allocated: {', '.join(c.expected)})")
        elif c.seen != c.expected:
            missing = sorted(set(c.expected) - set(c.seen))
            extra = sorted(set(c.seen) - set(c.expected))
            out.problems.append(f"{c.who} sees {c.seen}, allocated {c.expected}"
                                + (f"; missing {missing}" if missing else "")
                                + (f"; not allocated to it {extra}" if extra else ""))
    return out
