"""Aligned text tables, through tabulate, for the terminal and for evidence.

The header goes in as the first row, not as tabulate's ``headers`` (which would widen each
column by two), and trailing blanks are cut from every line.
"""

from __future__ import annotations

from typing import Iterable

from tabulate import DataRow, TableFormat, tabulate

#: kubectl's layout: left-aligned columns three spaces apart, no rules.
_KUBECTL = TableFormat(lineabove=None, linebelowheader=None, linebetweenrows=None, linebelow=None,
                       headerrow=DataRow("", "   ", ""), datarow=DataRow("", "   ", ""),
                       padding=0, with_header_hide=None)


def plain_lines(rows: Iterable[Iterable[object]]) -> list[str]:
    """Rows (the first one the header) as columns two spaces apart, one string per line; cells
    are shown as given (no number parsing) and may carry terminal escapes.

    >>> plain_lines([("CHECK", "RESULT"), ("server-version", "PASS")])
    ['CHECK           RESULT', 'server-version  PASS']
    """
    text = tabulate([list(row) for row in rows], tablefmt="plain", disable_numparse=True)
    return [line.rstrip() for line in text.splitlines()]


def kubectl_table(rows: Iterable[Iterable[object]], header: Iterable[str]) -> str:
    """Rows as aligned columns, like kubectl's output.

    >>> print(kubectl_table([("slice-a", 4), ("slice-bb", 12)], ("NAME", "DEVICES")))
    NAME       DEVICES
    slice-a    4
    slice-bb   12
    """
    text = tabulate([list(header), *rows], tablefmt=_KUBECTL, disable_numparse=True)
    return "\n".join(line.rstrip() for line in text.splitlines())
