"""Where the benchmarks' figures are kept: ``benchmarks/RESULTS.md``, one section per script.

Each script's entry point runs inside :func:`recorded`: what it prints still goes to the
terminal, and once it finishes the same text replaces that script's section of RESULTS.md,
headed by the command, the time (UTC), the machine's CPUs and its load before and after (a
figure taken on a busy machine says so).  A run that raises or is interrupted records nothing;
one that exits non-zero is recorded with its exit status.  Nobody edits RESULTS.md by hand.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import re
import shlex
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
TITLE = ("# Benchmark results\n\nWritten by the scripts in `benchmarks/` (each replaces its own section "
         "when it finishes); never edited by hand.  Rerun a script to refresh its figures.\n")


class _Tee(io.TextIOBase):
    def __init__(self, terminal):
        self.terminal, self.kept = terminal, io.StringIO()

    def write(self, text):
        self.kept.write(text)
        return self.terminal.write(text)

    def flush(self):
        self.terminal.flush()


def section(script: str, command: str, body: str, status: int, cpus: int, load: tuple[float, float],
            when: datetime.datetime) -> str:
    """One script's section.

    >>> print(section("x.py", "python benchmarks/x.py", "a 1 s\\n", 0, 2, (0.1, 1.5),
    ...               datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.timezone.utc)), end="")
    ## x.py
    <BLANKLINE>
    `python benchmarks/x.py` at 2026-01-02 03:04 UTC on 2 CPUs, load 0.10 before, 1.50 after
    <BLANKLINE>
    ```
    a 1 s
    ```
    <BLANKLINE>
    """
    exit_note = "" if status == 0 else f", exit status {status}"
    return (f"## {script}\n\n`{command}` at {when:%Y-%m-%d %H:%M} UTC on {cpus} CPUs, "
            f"load {load[0]:.2f} before, {load[1]:.2f} after{exit_note}\n\n```\n{body.rstrip()}\n```\n\n")


def replace_section(document: str, script: str, new: str) -> str:
    """``document`` with ``script``'s section replaced by ``new`` (appended when absent).

    >>> doc = TITLE + "\\n## a.py\\n\\nold\\n\\n## b.py\\n\\nkept\\n\\n"
    >>> out = replace_section(doc, "a.py", "## a.py\\n\\nnew\\n\\n")
    >>> "old" in out, "new" in out, "kept" in out
    (False, True, True)
    >>> "## c.py" in replace_section(doc, "c.py", "## c.py\\n\\nx\\n\\n")
    True
    """
    if not document.strip():
        document = TITLE + "\n"
    pattern = re.compile(rf"^## {re.escape(script)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(document):
        return pattern.sub(lambda _: new, document, count=1)
    return document.rstrip("\n") + "\n\n" + new


def run_recorded(script_file: str, entry) -> int:
    """Run ``entry()`` (a benchmark's main, returning its exit status or None), printing as it
    does, and keep what it printed in RESULTS.md."""
    script = Path(script_file).name
    command = "python " + " ".join(shlex.quote(a) for a in [f"benchmarks/{script}", *sys.argv[1:]])
    when = datetime.datetime.now(datetime.timezone.utc)
    before = os.getloadavg()[0]
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        status = entry() or 0
    text = section(script, command, tee.kept.getvalue(), int(status), os.cpu_count() or 0,
                   (before, os.getloadavg()[0]), when)
    existing = RESULTS.read_text() if RESULTS.exists() else ""
    RESULTS.write_text(replace_section(existing, script, text))
    print(f"figures kept in {RESULTS.relative_to(RESULTS.parent.parent)} (section {script})")
    return int(status)
