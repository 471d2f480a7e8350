"""The every-node sweep as a picture: one tile per node, one square per GPU, coloured by the
verdict. It goes into the HTML report as SVG and beside summary.json as a PNG (``fleet.png``).
The module also makes the few lines the terminal prints for the sweep.

Both pictures are drawn from one layout (:func:`_layout`: boxes, lines and text at pixel
positions), so the SVG and the PNG show the same thing and only the drawing code differs.

A hundred nodes fit on one screen. There are ten tiles to a row. Each tile is a row of up to
eight 12-pixel squares (a node with more GPUs wraps to a second row), with the node's name
under it and, on a node that did not pass, the reason: its diagnosis code, ``busy`` or
``no verdict``. Colour is never the only sign. The palette is colour-blind safe (ColorBrewer
Dark2's teal and orange, and greys). A failed GPU also has a cross, a busy one a bar and a
tainted one (out of service by a device taint, left alone) a slash; a GPU node that publishes
no device is one white square with a grey cross. A GPU
with no verdict is hollow, with a dashed outline, and a failed node's tile is framed.

>>> nodes = [NodeVerdict("gpu-2", 2, FAILED, "prepare-refused"), NodeVerdict("gpu-1", 2, PASSED)]
>>> render_svg(nodes, "sweep").startswith('<svg xmlns="http://www.w3.org/2000/svg"')
True
>>> terminal_lines(nodes)
['  gpu-2  failed  prepare-refused', 'every-node: 1 passed, 1 failed of 2 nodes']
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Union
from xml.sax.saxutils import escape, quoteattr

from draconf.tables import plain_lines

PASSED, FAILED, BUSY, NO_VERDICT, TAINTED = "passed", "failed", "busy", "no-verdict", "tainted"
NOT_PUBLISHED = "not-published"
#: Every status, in the order the legend and the summary line give them.  ``tainted``: a GPU its
#: driver or an admin took out of service (a device taint), which the sweep leaves alone;
#: ``not-published``: a GPU node that publishes no device, so none of it can be proven.
STATUSES = (PASSED, FAILED, BUSY, NO_VERDICT, TAINTED, NOT_PUBLISHED)
#: How a status reads in the legend, on a tile and in the terminal.
LABELS = {PASSED: "passed", FAILED: "failed", BUSY: "busy", NO_VERDICT: "no verdict", TAINTED: "tainted",
          NOT_PUBLISHED: "not published"}


@dataclass(frozen=True)
class NodeVerdict:
    """One node's verdict in the sweep.

    ``code`` is the diagnosis code of a failure. ``gpu_status`` gives one status per GPU when
    every GPU was swept; without it, each GPU shows the node's ``status``.

    >>> NodeVerdict("n", 2, FAILED, "cdi-wrong-device", (PASSED, FAILED)).squares
    ('passed', 'failed')
    >>> NodeVerdict("n", 3, BUSY).squares
    ('busy', 'busy', 'busy')
    >>> NodeVerdict("n", 2, "ok")
    Traceback (most recent call last):
    ValueError: node n: unknown status ok (one of passed, failed, busy, no-verdict, tainted, not-published)
    """

    name: str
    gpus: int
    status: str
    code: str = ""
    gpu_status: tuple[str, ...] = ()

    def __post_init__(self):
        # A list given for gpu_status is kept as a tuple, so the verdict stays hashable.
        object.__setattr__(self, "gpu_status", tuple(self.gpu_status))
        unknown = sorted({self.status, *self.gpu_status} - set(STATUSES))
        if unknown:
            raise ValueError(f"node {self.name}: unknown status {', '.join(unknown)} "
                             f"(one of {', '.join(STATUSES)})")
        if self.gpus < 0:
            raise ValueError(f"node {self.name}: {self.gpus} GPUs")
        if self.gpu_status and len(self.gpu_status) != self.gpus:
            raise ValueError(f"node {self.name}: {len(self.gpu_status)} GPU statuses "
                             f"for {self.gpus} GPUs")

    @property
    def squares(self) -> tuple[str, ...]:
        """The status of each GPU, in order."""
        return self.gpu_status or (self.status,) * self.gpus


def by_name(nodes: Iterable[NodeVerdict]) -> list[NodeVerdict]:
    """The nodes ordered by name, with numbers compared as numbers, so gpu-2 comes before
    gpu-10 as a reader expects.

    >>> [n.name for n in by_name(NodeVerdict(name, 1, PASSED) for name in ("gpu-10", "gpu-2", "a"))]
    ['a', 'gpu-2', 'gpu-10']
    """
    def key(node: NodeVerdict):
        parts = re.split(r"(\d+)", node.name)
        return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p], node.name
    return sorted(nodes, key=key)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters by an ellipsis in the middle. Node names often
    differ only at the end (pool-a-17) or only at the start (ip-10-0-3-7.ec2.internal), so
    both ends are kept.

    >>> shorten("gpu-pool-a-node-17", 12)
    'gpu-po…de-17'
    >>> shorten("gpu-1", 12)
    'gpu-1'
    """
    if len(text) <= limit:
        return text
    head = limit // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


# --- Colours and sizes ---------------------------------------------------------------------

@dataclass(frozen=True)
class _Style:
    fill: str      # "" for none (hollow)
    outline: str
    mark: str      # drawn over the square, so a status is told apart without colour


_STYLES = {
    PASSED: _Style("#1b9e77", "#147a5c", ""),
    FAILED: _Style("#d95f02", "#a34702", "cross"),
    BUSY: _Style("#8c8c8c", "#6b6b6b", "bar"),
    NO_VERDICT: _Style("#f4f4f4", "#707070", ""),
    TAINTED: _Style("#d9d9d9", "#8c8c8c", "slash"),
    NOT_PUBLISHED: _Style("#ffffff", "#b0b0b0", "cross"),
}
_INK, _MUTED, _FAILED_INK, _BACKGROUND = "#222222", "#5a5a5a", "#a34702", "#ffffff"

_MARGIN = 16
_SQUARE, _SQUARE_GAP = 12, 2
_SQUARES_PER_ROW = 8
_TILE_WIDTH = _SQUARES_PER_ROW * (_SQUARE + _SQUARE_GAP) - _SQUARE_GAP
_TILES_PER_ROW = 10
_GUTTER_X, _GUTTER_Y = 14, 12
_LABEL_SIZE, _LABEL_LINE = 10, 12
#: Characters of a label that fit under a tile: the SVG's monospace font is 0.6 em wide.
_LABEL_CHARS = int(_TILE_WIDTH / (0.6 * _LABEL_SIZE))
_TITLE_SIZE, _TEXT_SIZE = 16, 11
_MIN_WIDTH = 560


# --- The layout both pictures are drawn from -----------------------------------------------

@dataclass(frozen=True)
class _Box:
    x: int
    y: int
    width: int
    height: int
    fill: str        # "" for none
    outline: str
    dashed: bool = False


@dataclass(frozen=True)
class _Line:
    x1: int
    y1: int
    x2: int
    y2: int
    colour: str
    width: int = 2


@dataclass(frozen=True)
class _Text:
    x: int
    y: int           # the top of the line
    text: str
    size: int
    colour: str = _INK
    max_width: int = 0   # pixels the text must fit in (0: no limit); the PNG measures it


@dataclass(frozen=True)
class _Group:
    """One node's shapes, with the tooltip the SVG shows over them (its full name)."""
    tooltip: str
    shapes: tuple


_Shape = Union[_Box, _Line, _Text, _Group]


@dataclass(frozen=True)
class _Picture:
    width: int
    height: int
    title: str
    shapes: tuple


def _square(x: int, y: int, status: str) -> list[_Shape]:
    style, size, inset = _STYLES[status], _SQUARE, 3
    shapes: list[_Shape] = [_Box(x, y, size, size, style.fill, style.outline,
                                 dashed=status == NO_VERDICT)]
    # A mark on a coloured square is cut out of it; on a white one, drawn in its outline's colour.
    ink = style.outline if style.fill in ("", _BACKGROUND) else _BACKGROUND
    if style.mark == "cross":
        shapes += [_Line(x + inset, y + inset, x + size - inset, y + size - inset, ink),
                   _Line(x + size - inset, y + inset, x + inset, y + size - inset, ink)]
    elif style.mark == "bar":
        shapes.append(_Line(x + inset, y + size // 2, x + size - inset, y + size // 2, ink))
    elif style.mark == "slash":
        shapes.append(_Line(x + inset, y + size - inset, x + size - inset, y + inset, style.outline))
    return shapes


def _reason(node: NodeVerdict) -> str:
    """The second line of a tile: why the node did not pass (empty when it passed)."""
    if node.status == FAILED:
        return node.code or LABELS[FAILED]
    return "" if node.status == PASSED else LABELS[node.status]


def _tile(node: NodeVerdict, x: int, y: int, square_rows: int) -> _Group:
    shapes: list[_Shape] = []
    height = square_rows * (_SQUARE + _SQUARE_GAP) + 2 + 2 * _LABEL_LINE
    if node.status == FAILED:
        # a frame, so a failed node stands out even when only one of its GPUs failed
        shapes.append(_Box(x - 4, y - 4, _TILE_WIDTH + 8, height + 6, "", _STYLES[FAILED].outline))
    # A node that publishes no GPU still gets one square of its status, so its tile is not empty.
    for index, status in enumerate(node.squares or (node.status,)):
        row, column = divmod(index, _SQUARES_PER_ROW)
        shapes += _square(x + column * (_SQUARE + _SQUARE_GAP), y + row * (_SQUARE + _SQUARE_GAP), status)
    label_y = y + square_rows * (_SQUARE + _SQUARE_GAP) + 2
    shapes.append(_Text(x, label_y, shorten(node.name, _LABEL_CHARS), _LABEL_SIZE,
                        max_width=_TILE_WIDTH))
    reason = _reason(node)
    if reason:
        shapes.append(_Text(x, label_y + _LABEL_LINE, shorten(reason, _LABEL_CHARS), _LABEL_SIZE,
                            _FAILED_INK if node.status == FAILED else _MUTED, max_width=_TILE_WIDTH))
    tooltip = f"{node.name}: {LABELS[node.status]}" + (f" [{node.code}]" if node.code else "")
    return _Group(tooltip + f", {node.gpus} GPU{'s' if node.gpus != 1 else ''}", tuple(shapes))


def _code_counts(nodes: list[NodeVerdict]) -> list[str]:
    """``code N`` for each failure code, the most frequent first."""
    counts = Counter(n.code or "(no code)" for n in nodes if n.status == FAILED)
    return [f"{code} {count}" for code, count in sorted(counts.items(), key=lambda c: (-c[1], c[0]))]


def _wrap(items: list[str], first: str, chars: int) -> list[str]:
    """``first`` then the items, comma-separated, in lines of at most ``chars`` characters."""
    lines, line = [], first
    for item in items:
        separator = "" if line == first else ", "
        if len(line) + len(separator) + len(item) > chars and line != first:
            lines.append(line + ",")
            line = "    " + item
        else:
            line += separator + item
    return lines + [line]


def _text_width(text: str, size: int) -> int:
    return math.ceil(len(text) * 0.6 * size)


def _layout(nodes: Iterable[NodeVerdict], title: str) -> _Picture:
    nodes = by_name(nodes)
    columns = max(1, min(_TILES_PER_ROW, len(nodes)))
    square_rows = max(1, max((math.ceil(n.gpus / _SQUARES_PER_ROW) for n in nodes), default=1))
    tile_height = square_rows * (_SQUARE + _SQUARE_GAP) + 2 + 2 * _LABEL_LINE
    counts = Counter(n.status for n in nodes)

    # The legend row: a square and "label N" per status.
    legend = []
    for status in STATUSES:
        text = f"{LABELS[status]} {counts[status]}"
        legend.append((status, text, _SQUARE + 5 + _text_width(text, _TEXT_SIZE) + 18))
    grid_width = columns * (_TILE_WIDTH + _GUTTER_X) - _GUTTER_X
    width = max(2 * _MARGIN + grid_width, 2 * _MARGIN + sum(w for *_, w in legend), _MIN_WIDTH)

    shapes: list[_Shape] = []
    y = _MARGIN
    shapes.append(_Text(_MARGIN, y, title, _TITLE_SIZE))
    y += _TITLE_SIZE + 6
    gpus = sum(n.gpus for n in nodes)
    shapes.append(_Text(_MARGIN, y, f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}, "
                                    f"{gpus} GPU{'s' if gpus != 1 else ''}", _TEXT_SIZE, _MUTED))
    y += _TEXT_SIZE + 10
    x = _MARGIN
    for status, text, advance in legend:
        shapes += _square(x, y, status)
        shapes.append(_Text(x + _SQUARE + 5, y, text, _TEXT_SIZE))
        x += advance
    y += _SQUARE + 8
    codes = _code_counts(nodes)
    if codes:
        chars = int((width - 2 * _MARGIN) / (0.6 * _TEXT_SIZE))
        for line in _wrap(codes, "failed by code: ", chars):
            shapes.append(_Text(_MARGIN, y, line, _TEXT_SIZE, _FAILED_INK))
            y += _TEXT_SIZE + 4
    y += 12  # room above the first row of tiles, for a failed tile's frame

    for index, node in enumerate(nodes):
        row, column = divmod(index, columns)
        shapes.append(_tile(node, _MARGIN + column * (_TILE_WIDTH + _GUTTER_X),
                            y + row * (tile_height + _GUTTER_Y), square_rows))
    rows = math.ceil(len(nodes) / columns)
    height = y + rows * (tile_height + _GUTTER_Y) - _GUTTER_Y + _MARGIN if rows else y + _MARGIN
    return _Picture(width, height, title, tuple(shapes))


# --- SVG -----------------------------------------------------------------------------------

def _svg_shape(shape: _Shape) -> list[str]:
    if isinstance(shape, _Group):
        return ["<g>", f"<title>{escape(shape.tooltip)}</title>",
                *(line for inner in shape.shapes for line in _svg_shape(inner)), "</g>"]
    if isinstance(shape, _Box):
        dash = ' stroke-dasharray="2 2"' if shape.dashed else ""
        return [f'<rect x="{shape.x}" y="{shape.y}" width="{shape.width}" height="{shape.height}" '
                f'fill="{shape.fill or "none"}" stroke="{shape.outline}"{dash}/>']
    if isinstance(shape, _Line):
        return [f'<line x1="{shape.x1}" y1="{shape.y1}" x2="{shape.x2}" y2="{shape.y2}" '
                f'stroke="{shape.colour}" stroke-width="{shape.width}"/>']
    # SVG places text by its baseline, the layout by the top of its line.
    baseline = shape.y + round(0.8 * shape.size)
    return [f'<text x="{shape.x}" y="{baseline}" font-size="{shape.size}" fill="{shape.colour}">'
            f"{escape(shape.text)}</text>"]


def render_svg(nodes: list[NodeVerdict], title: str) -> str:
    """The picture as an SVG document. Given the same nodes, it is the same text, byte for byte.
    Every name and code is XML-escaped (node names come from the cluster). Each tile's
    tooltip gives the node's full name."""
    picture = _layout(nodes, title)
    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{picture.width}" '
             f'height="{picture.height}" viewBox="0 0 {picture.width} {picture.height}" '
             f'role="img" aria-label={quoteattr(title)} '
             f'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace">',
             f"<title>{escape(title)}</title>",
             f'<rect width="{picture.width}" height="{picture.height}" fill="{_BACKGROUND}"/>']
    for shape in picture.shapes:
        lines += _svg_shape(shape)
    return "\n".join(lines + ["</svg>"]) + "\n"


# --- PNG -----------------------------------------------------------------------------------

def render_png(nodes: list[NodeVerdict], title: str, path: Path) -> Path:
    """The same picture as a PNG at ``path``, drawn with Pillow. It needs no browser, no font
    file and no network. Returns ``path``."""
    # Pillow is imported here, not at the top: a session that never draws a picture (and the
    # terminal lines and SVG) does not load it.
    from PIL import Image, ImageDraw

    picture = _layout(nodes, title)
    image = Image.new("RGB", (picture.width, picture.height), _BACKGROUND)
    draw = ImageDraw.Draw(image)
    fonts: dict = {}
    for shape in picture.shapes:
        for flat in (shape.shapes if isinstance(shape, _Group) else (shape,)):
            _draw_png(draw, flat, fonts)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="PNG", optimize=True)
    return path


def _font(size: int, fonts: dict):
    from PIL import ImageFont
    if size not in fonts:
        try:
            # Pillow 10.1 and later: its built-in FreeType font, at this size
            fonts[size] = ImageFont.load_default(size=size)
        except TypeError:
            # Pillow 10.0: only the one bitmap size
            fonts[size] = ImageFont.load_default()
    return fonts[size]


def _draw_png(draw, shape: _Shape, fonts: dict) -> None:
    if isinstance(shape, _Box):
        right, bottom = shape.x + shape.width, shape.y + shape.height
        if shape.dashed:
            if shape.fill:
                draw.rectangle((shape.x, shape.y, right, bottom), fill=shape.fill)
            _dashed_outline(draw, shape.x, shape.y, right, bottom, shape.outline)
        else:
            draw.rectangle((shape.x, shape.y, right, bottom), fill=shape.fill or None,
                           outline=shape.outline)
    elif isinstance(shape, _Line):
        draw.line((shape.x1, shape.y1, shape.x2, shape.y2), fill=shape.colour, width=shape.width)
    elif isinstance(shape, _Text):  # a group arrives as its shapes (see the caller)
        font, text = _font(shape.size, fonts), shape.text
        # The layout counts characters of a monospace font. The default font is proportional,
        # so a label of wide letters is cut further until it fits under its tile.
        limit = len(text)
        while shape.max_width and limit > 2 and draw.textlength(text, font=font) > shape.max_width:
            limit -= 1
            text = shorten(shape.text, limit)
        draw.text((shape.x, shape.y), text, fill=shape.colour, font=font)


def _dashed_outline(draw, left: int, top: int, right: int, bottom: int, colour: str, dash: int = 2) -> None:
    """A rectangle's outline in dashes (ImageDraw draws only solid lines)."""
    for x in range(left, right + 1, 2 * dash):
        end = min(x + dash - 1, right)
        draw.line((x, top, end, top), fill=colour)
        draw.line((x, bottom, end, bottom), fill=colour)
    for y in range(top, bottom + 1, 2 * dash):
        end = min(y + dash - 1, bottom)
        draw.line((left, y, left, end), fill=colour)
        draw.line((right, y, right, end), fill=colour)


# --- The terminal --------------------------------------------------------------------------

def summary_line(nodes: Iterable[NodeVerdict]) -> str:
    """The sweep in one line. It always gives the passed count, and the other statuses only
    when some node has them.

    >>> summary_line([NodeVerdict("a", 8, PASSED), NodeVerdict("b", 8, NO_VERDICT)])
    'every-node: 1 passed, 1 no verdict of 2 nodes'
    """
    nodes = list(nodes)
    counts = Counter(n.status for n in nodes)
    parts = [f"{counts[PASSED]} {LABELS[PASSED]}"]
    parts += [f"{counts[s]} {LABELS[s]}" for s in STATUSES[1:] if counts[s]]
    return f"every-node: {', '.join(parts)} of {len(nodes)} node{'s' if len(nodes) != 1 else ''}"


def terminal_lines(nodes: list[NodeVerdict]) -> list[str]:
    """What the terminal prints for the sweep: one aligned line per failed, busy or not published node (name,
    status, code), then :func:`summary_line`. There is never a line per passed node, so a
    hundred good nodes take one line.

    >>> for line in terminal_lines([NodeVerdict("gpu-3", 8, BUSY), NodeVerdict("gpu-1", 8, PASSED),
    ...                             NodeVerdict("gpu-20", 8, FAILED, "cdi-wrong-device")]):
    ...     print(line)
      gpu-3   busy
      gpu-20  failed  cdi-wrong-device
    every-node: 1 passed, 1 failed, 1 busy of 3 nodes
    """
    nodes = by_name(nodes)
    rows = [(n.name, LABELS[n.status], n.code) for n in nodes if n.status in (FAILED, BUSY, NOT_PUBLISHED)]
    return ["  " + line for line in plain_lines(rows)] + [summary_line(nodes)]
