"""The every-node sweep's picture (draconf/reporting/fleet_picture.py): a hundred nodes in one
readable SVG and PNG, coloured by verdict, and a terminal that names only the nodes to act on."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from PIL import Image

from draconf.reporting import fleet_picture as fp
from draconf.reporting.fleet_picture import BUSY, FAILED, NO_VERDICT, NOT_PUBLISHED, PASSED, TAINTED, NodeVerdict

SVG = "{http://www.w3.org/2000/svg}"
COLOUR = {status: style.fill for status, style in fp._STYLES.items()}


def fleet(gpus: int = 8) -> list[NodeVerdict]:
    """A hundred nodes that all passed but three: one failed whole, one with a single bad GPU,
    and one busy."""
    nodes = [NodeVerdict(f"gpu-node-{i}", gpus, PASSED) for i in range(1, 101)]
    nodes[6] = NodeVerdict("gpu-node-7", gpus, FAILED, "prepare-refused")
    nodes[41] = NodeVerdict("gpu-node-42", gpus, FAILED, "cdi-wrong-device",
                            (PASSED,) * 3 + (FAILED,) + (PASSED,) * (gpus - 4))
    nodes[49] = NodeVerdict("gpu-node-50", gpus, BUSY)
    return nodes


def svg_root(nodes, title="every-node") -> ET.Element:
    return ET.fromstring(fp.render_svg(nodes, title))


def tile_of(root: ET.Element, name: str) -> ET.Element:
    """The <g> of the node named ``name`` (its tooltip starts with the full name)."""
    return next(g for g in root.iter(SVG + "g") if g.find(SVG + "title").text.startswith(name + ":"))


def square_fills(tile: ET.Element) -> list[str]:
    return [r.get("fill") for r in tile.iter(SVG + "rect")
            if r.get("width") == str(fp._SQUARE) and r.get("height") == str(fp._SQUARE)]


def test_a_hundred_nodes_render_as_one_svg_document():
    root = svg_root(fleet())
    assert root.tag == SVG + "svg"
    assert len(list(root.iter(SVG + "g"))) == 100
    assert int(root.get("width")) <= 2000 and int(root.get("height")) <= 2000


def test_a_hundred_nodes_of_eight_gpus_make_a_png_that_fits_a_screen(tmp_path):
    path = fp.render_png(fleet(), "every-node", tmp_path / "fleet.png")
    assert path == tmp_path / "fleet.png"
    with Image.open(path) as image:
        assert image.format == "PNG"
        width, height = image.size
        assert 600 <= width <= 2000 and 300 <= height <= 2000
        colours = {"#%02x%02x%02x" % rgb for _, rgb in image.convert("RGB").getcolors(1 << 16)}
    assert {COLOUR[PASSED], COLOUR[FAILED], COLOUR[BUSY]} <= colours


def test_the_png_and_svg_are_the_same_size(tmp_path):
    root = svg_root(fleet(gpus=4)[:37])
    with Image.open(fp.render_png(fleet(gpus=4)[:37], "every-node", tmp_path / "fleet.png")) as image:
        assert image.size == (int(root.get("width")), int(root.get("height")))


def test_each_status_has_its_colour_and_no_verdict_a_dashed_outline():
    nodes = fleet() + [NodeVerdict("not-published", 2, NO_VERDICT),
                       NodeVerdict("out-of-service", 2, TAINTED, gpu_status=(PASSED, TAINTED))]
    root = svg_root(nodes)
    fills = {r.get("fill") for r in root.iter(SVG + "rect")}
    assert set(COLOUR.values()) <= fills
    hollow = [r for r in tile_of(root, "not-published").iter(SVG + "rect") if r.get("stroke-dasharray")]
    assert len(hollow) == 2


def test_failed_gpus_carry_a_cross_so_colour_is_not_the_only_sign():
    tile = tile_of(svg_root(fleet()), "gpu-node-7")
    assert len(list(tile.iter(SVG + "line"))) == 2 * 8


def test_a_gpu_node_that_publishes_nothing_is_one_crossed_white_square_named_in_the_terminal():
    nodes = [NodeVerdict("gpu-1", 8, PASSED), NodeVerdict("gpu-9", 0, NOT_PUBLISHED)]
    tile = tile_of(svg_root(nodes), "gpu-9")
    assert square_fills(tile) == [COLOUR[NOT_PUBLISHED]]
    assert {line.get("stroke") for line in tile.iter(SVG + "line")} == {fp._STYLES[NOT_PUBLISHED].outline}
    assert "not published" in [t.text for t in tile.iter(SVG + "text")]
    assert fp.terminal_lines(nodes) == ["  gpu-9  not published", "every-node: 1 passed, 1 not published of 2 nodes"]


def test_a_tainted_gpu_carries_a_slash_and_its_tile_says_tainted():
    tile = tile_of(svg_root([NodeVerdict("n", 2, TAINTED, gpu_status=(PASSED, TAINTED))]), "n")
    assert len(list(tile.iter(SVG + "line"))) == 1
    assert "tainted" in [t.text for t in tile.iter(SVG + "text")]


def test_failure_codes_are_on_their_tiles_and_counted_in_the_legend():
    root = svg_root(fleet())
    assert "prepare-refused" in [t.text for t in tile_of(root, "gpu-node-7").iter(SVG + "text")]
    assert "cdi-wrong-device" in [t.text for t in tile_of(root, "gpu-node-42").iter(SVG + "text")]
    legend = [t.text for t in root.iter(SVG + "text")]
    assert "passed 97" in legend and "failed 2" in legend and "busy 1" in legend
    assert "no verdict 0" in legend
    assert "failed by code: cdi-wrong-device 1, prepare-refused 1" in legend


def test_one_bad_gpu_colours_exactly_one_square():
    fills = square_fills(tile_of(svg_root(fleet()), "gpu-node-42"))
    assert len(fills) == 8
    assert fills.count(COLOUR[FAILED]) == 1 and fills.index(COLOUR[FAILED]) == 3
    assert fills.count(COLOUR[PASSED]) == 7


def test_without_per_gpu_statuses_every_gpu_takes_the_nodes():
    fills = square_fills(tile_of(svg_root(fleet()), "gpu-node-50"))
    assert fills == [COLOUR[BUSY]] * 8


def test_names_from_the_cluster_are_escaped():
    text = fp.render_svg([NodeVerdict('evil<&>"node', 1, FAILED, "<script>")], "a <b> & c")
    assert "<script>" not in text and "evil<&>" not in text
    assert "&lt;script&gt;" in text and "evil&lt;&amp;&gt;" in text
    root = ET.fromstring(text)
    assert tile_of(root, 'evil<&>"node').find(SVG + "title").text.startswith('evil<&>"node: failed')
    assert root.get("aria-label") == "a <b> & c"


def test_long_names_are_shortened_with_an_ellipsis_but_kept_whole_in_the_tooltip():
    name = "ip-10-0-3-117.eu-west-1.compute.internal"
    tile = tile_of(svg_root([NodeVerdict(name, 8, PASSED)]), name)
    label = tile.find(SVG + "text").text
    assert "…" in label and len(label) == fp._LABEL_CHARS
    assert label.startswith("ip-10-0") and label.endswith("internal")
    assert tile.find(SVG + "title").text.startswith(name + ":")


def test_the_svg_is_deterministic_and_sorted_by_name():
    nodes = fleet()
    assert fp.render_svg(nodes, "t") == fp.render_svg(list(reversed(nodes)), "t")
    names = [g.find(SVG + "title").text.split(":")[0] for g in svg_root(nodes).iter(SVG + "g")]
    assert names[:3] == ["gpu-node-1", "gpu-node-2", "gpu-node-3"] and names[-1] == "gpu-node-100"


def test_a_node_with_more_gpus_than_a_row_wraps_and_still_shows_every_gpu(tmp_path):
    nodes = [NodeVerdict("big", 16, PASSED), NodeVerdict("small", 2, FAILED, "prepare-refused")]
    assert len(square_fills(tile_of(svg_root(nodes), "big"))) == 16
    with Image.open(fp.render_png(nodes, "t", tmp_path / "fleet.png")) as image:
        assert image.size[0] <= 2000


def test_a_node_that_publishes_no_gpu_still_gets_a_tile():
    tile = tile_of(svg_root([NodeVerdict("empty", 0, NO_VERDICT)]), "empty")
    assert square_fills(tile) == [COLOUR[NO_VERDICT]]
    assert "no verdict" in [t.text for t in tile.iter(SVG + "text")]


def test_no_nodes_still_make_a_picture(tmp_path):
    assert svg_root([]).tag == SVG + "svg"
    with Image.open(fp.render_png([], "no GPU nodes", tmp_path / "fleet.png")) as image:
        assert image.size[0] > 0


def test_the_terminal_lists_only_failed_and_busy_nodes_then_the_counts():
    lines = fp.terminal_lines(fleet())
    assert len(lines) == 4
    assert lines[-1] == "every-node: 97 passed, 2 failed, 1 busy of 100 nodes"
    assert [line.split()[:3] for line in lines[:-1]] == [
        ["gpu-node-7", "failed", "prepare-refused"],
        ["gpu-node-42", "failed", "cdi-wrong-device"],
        ["gpu-node-50", "busy"]]
    assert not any("passed" in line for line in lines[:-1])


def test_the_terminal_counts_nodes_without_a_verdict_but_names_none():
    lines = fp.terminal_lines([NodeVerdict("a", 8, PASSED), NodeVerdict("b", 8, NO_VERDICT)])
    assert lines == ["every-node: 1 passed, 1 no verdict of 2 nodes"]


@pytest.mark.parametrize("kwargs, message", [
    ({"status": "ok"}, "unknown status ok"),
    ({"status": FAILED, "gpu_status": (PASSED, "bad")}, "unknown status bad"),
    ({"status": PASSED, "gpu_status": (PASSED,)}, "1 GPU statuses for 2 GPUs"),
])
def test_a_verdict_outside_the_vocabulary_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NodeVerdict("n", 2, **kwargs)
