"""The figure kit's one palette: every figure module draws its rectangles with views.kit.box.

Every figure that figures_ddp, figures_launch and figures_scale register is drawn here as its
page shows it (a lab view from the record of the run its page's marker names), and each of its
<rect>s, key swatches included, must wear one of the kit's kinds exactly as the kit draws it:
the class fig-fill--KIND, that kind's fallback fill and fill-opacity, the kit's outline (its
own or its group's) and the kit's dash pattern. A module that draws a rectangle of its own
with another opacity, grey or stroke fails here.
"""

import pathlib
import re
import sys
import types
import xml.etree.ElementTree as ET

import pytest

from site_tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))
from views import DRAWINGS, MARKER, VIEWS, kit  # noqa: E402

MODULES = {"views.figures_ddp", "views.figures_launch", "views.figures_scale"}
SVG = re.compile(r"<svg\b.*?</svg>", re.DOTALL)


def lab_markers():
    """{view: run} for every `<!-- lab:RUN:VIEW -->` on the site's pages."""
    found = {}
    for page in pathlib.Path(ROOT / "docs").rglob("*.md"):
        for match in MARKER.finditer(page.read_text(encoding="utf-8")):
            found[match["view"]] = match["run"]
    return found


def registered():
    """(kind of registry, name, function) of every figure the three modules register."""
    drawings = [("figure", n, f) for n, f in DRAWINGS.items() if f.__module__ in MODULES]
    views = [("lab", n, f) for n, f in VIEWS.items() if f.__module__ in MODULES]
    return drawings + views


FIGURES = registered()


@pytest.fixture(scope="module")
def drawn(lab_record):
    """Every registered figure of the three modules, by name: its HTML as its page gets it."""
    markers, html = lab_markers(), {}
    for registry, name, function in FIGURES:
        if registry == "figure":
            html[name] = function()
            continue
        run = markers[name]
        result = lab_record(run)["result"]
        context = types.SimpleNamespace(run=types.SimpleNamespace(name=run), result=result)
        html[name] = function(context)
    return html


def local(tag):
    return tag.rsplit("}", 1)[-1]


def rects_with_their_groups(markup):
    """(rect, [its enclosing <g>s]) for every <rect> of every <svg> in `markup`."""
    found = []

    def walk(element, groups):
        for child in element:
            if local(child.tag) == "rect":
                found.append((child, groups))
            walk(child, groups + [child] if local(child.tag) == "g" else groups)

    for svg in SVG.findall(markup):
        walk(ET.fromstring(svg), [])
    return found


def off_palette(markup):
    """What each <rect> in `markup` does differently from the kit's box, one line per rect."""
    wrong = []
    for rect, groups in rects_with_their_groups(markup):
        attrs = rect.attrib
        kinds = re.findall(r"\bfig-fill--(\w+)", attrs.get("class", ""))
        if len(kinds) != 1 or kinds[0] not in kit.KINDS:
            wrong.append(f"no kit kind: {attrs}")
            continue
        fill, opacity = kit.KINDS[kinds[0]]
        outline = next(
            (a for a in [attrs, *(g.attrib for g in reversed(groups))] if "stroke" in a), {}
        )
        if (
            attrs.get("fill") != fill
            or attrs.get("fill-opacity") != opacity
            or "fig-stroke" not in attrs["class"].split()
            or (outline.get("stroke"), outline.get("stroke-width")) != ("currentColor", "1")
            or attrs.get("stroke-dasharray") not in (None, "4 3")
        ):
            wrong.append(f"{kinds[0]} drawn otherwise: {attrs}")
    return wrong


def test_every_registered_figure_of_the_three_modules_is_checked():
    names = {name for _, name, _ in FIGURES}
    assert {"collectives", "buckets", "sampler-split"} <= names  # figures_ddp
    assert {"ranks-2x4", "nodes-rendezvous", "slurm-tree"} <= names  # figures_launch
    assert {"hide-or-wait", "ddp-memory", "zero-stages", "stuck-ranks"} <= names  # scale
    assert {name for registry, name, _ in FIGURES if registry == "lab"} <= set(lab_markers())


@pytest.mark.parametrize("name", [name for _, name, _ in FIGURES])
def test_every_rectangle_is_the_kits_box(drawn, name):
    rects = rects_with_their_groups(drawn[name])
    assert rects, f"{name} draws no rectangle"
    assert off_palette(drawn[name]) == []


def test_the_palette_has_one_look_per_kind():
    assert set(kit.KINDS) == {"primary", "accent", "faint", "none"}
    assert kit.KINDS["primary"][0] == kit.PRIMARY and kit.KINDS["accent"][0] == kit.ACCENT
    assert kit.KINDS["none"] == ("none", None)


def test_a_rectangle_drawn_off_the_kit_is_caught():
    good = kit.box(0, 0, 10, 10, "primary")
    other = good.replace(f'fill-opacity="{kit.KINDS["primary"][1]}"', 'fill-opacity="0.6"')
    grey = kit.box(0, 0, 10, 10, "faint").replace(kit.KINDS["faint"][0], "#9e9e9e")
    thin = good.replace('stroke-width="1"', 'stroke-width="0.75"')
    bare = kit.box(0, 0, 10, 10, "accent", outlined=False)  # outside an outlines() group

    def svg(body):
        return f'<svg xmlns="http://www.w3.org/2000/svg">{body}</svg>'

    assert off_palette(svg(good)) == []
    assert off_palette(svg(kit.outlines([bare]))) == []
    for drawn_otherwise in (other, grey, thin, bare):
        assert len(off_palette(svg(drawn_otherwise))) == 1, drawn_otherwise
