"""The figures of chapters 6 to 8 (hooks/views/figures_scale.py): each says in words what it draws,
stays legible on a phone, and draws the numbers of its source, a lab record or chapter 7's model.

The ZeRO figure reads the record of the build's own run (conftest's lab_record, shared with
test_zero_lab.py); the hang figure reads the committed where-stuck record; chapter 7's two
drawings are checked against the "scaling model" block of that chapter, executed here.
"""

import html
import importlib
import json
import re
import sys
import types
import xml.etree.ElementTree as ET

import pytest

from site_tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))
figures = importlib.import_module("views.figures_scale")
common = importlib.import_module("views.common")
views = importlib.import_module("views")

SVG = "{http://www.w3.org/2000/svg}"
CHAPTERS = ROOT / "docs" / "chapters"
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")


def context(name, result):
    return types.SimpleNamespace(run=types.SimpleNamespace(name=name), result=result)


@pytest.fixture(scope="module")
def stuck():
    return json.loads((ROOT / "docs/labs/recorded/where_stuck.json").read_text())["result"]


@pytest.fixture(scope="module")
def zero(lab_record):
    return lab_record("zero")["result"]


@pytest.fixture(scope="module")
def drawn(stuck, zero):
    """Every figure of the module, by its marker's name: its HTML as the page gets it."""
    return {
        "stuck-ranks": views.VIEWS["stuck-ranks"](context("where-stuck", stuck)),
        "hide-or-wait": views.DRAWINGS["hide-or-wait"](),
        "ddp-memory": views.DRAWINGS["ddp-memory"](),
        "zero-stages": views.VIEWS["zero-stages"](context("zero", zero)),
    }


def svg_of(markup):
    return ET.fromstring(re.search(r"<svg .*?</svg>", markup, re.DOTALL)[0])


def texts(markup):
    return ["".join(t.itertext()) for t in svg_of(markup).iter(f"{SVG}text")]


def alt_of(markup):
    return svg_of(markup).find(f"{SVG}title").text


def rect_widths(markup):
    return [float(r.get("width")) for r in svg_of(markup).iter(f"{SVG}rect")]


@pytest.fixture(scope="module")
def model():
    """Chapter 7's "scaling model" block, run: its functions and its example inputs."""
    page = (CHAPTERS / "07-scaling.md").read_text(encoding="utf-8")
    (source,) = re.findall(r'```python title="scaling model"\n(.*?)```', page, re.DOTALL)
    namespace = {}
    exec(compile(source, "scaling model", "exec"), namespace)  # prints its table; harmless
    return namespace


# ---------------------------------------------------------------------------------------------
# What every figure owes its reader
# ---------------------------------------------------------------------------------------------
def unspoken_numbers(markup):
    """Numbers drawn as text in the SVG that its text alternative never states."""
    said = set(NUMBER.findall(alt_of(markup)))
    return sorted({n for body in texts(markup) for n in NUMBER.findall(body)} - said)


def test_every_number_drawn_is_in_the_text_alternative(drawn):
    for name, markup in drawn.items():
        assert texts(markup), f"{name}: no text drawn"
        assert not unspoken_numbers(markup), f"{name}: {unspoken_numbers(markup)} not in alt"


def test_a_number_missing_from_the_alt_is_caught(drawn):
    markup = drawn["hide-or-wait"]
    alt = html.escape(alt_of(markup))
    assert alt in markup
    broken = markup.replace(alt, alt.replace("163.8", "164"))
    assert unspoken_numbers(broken) == ["163.8"]


def smallest_phone_px(markup):
    svg = svg_of(markup)
    width = float(svg.get("width"))
    sizes = [float(svg.get("font-size"))]
    sizes += [float(t.get("font-size")) for t in svg.iter(f"{SVG}text") if t.get("font-size")]
    return min(sizes) * min(1.0, common.PHONE_COLUMN_PX / width)


def test_every_figure_fits_a_phone_with_legible_text(drawn):
    for name, markup in drawn.items():
        px = smallest_phone_px(markup)
        assert px >= common.LEGIBLE_PX, f"{name}: text at {px:.1f} px on a phone"
        assert "fig-scroll__hint" not in markup, f"{name} scrolls sideways on a phone"


def test_a_figure_too_wide_for_a_phone_is_caught(drawn):
    markup = drawn["ddp-memory"].replace(f'width="{figures.WIDTH}"', 'width="520"', 1)
    assert smallest_phone_px(markup) < common.LEGIBLE_PX


def test_every_figure_has_a_title_key_and_caption(drawn):
    for name, markup in drawn.items():
        assert markup.startswith('<figure class="fig-figure"'), name
        assert len(alt_of(markup)) > 80, f"{name}: the text alternative says too little"
        assert markup.count('<ul class="fig-key">') == 1, f"{name}: no key"
        caption = re.search(r"<figcaption>(.*?)</figcaption>", markup, re.DOTALL)
        assert caption and len(caption[1]) > 80, f"{name}: no caption that says what to see"


def test_each_marker_is_placed_on_its_chapter_and_names_a_registered_figure():
    placed = {
        "06-debugging.md": "<!-- lab:where-stuck:stuck-ranks -->",
        "07-scaling.md": "<!-- figure:hide-or-wait -->\n\n",
        "08-past-ddp.md": "<!-- lab:zero:zero-stages -->",
    }
    for page, marker in placed.items():
        assert (CHAPTERS / page).read_text(encoding="utf-8").count(marker) == 1, (page, marker)
    assert "<!-- figure:ddp-memory -->" in (CHAPTERS / "07-scaling.md").read_text()
    assert {"hide-or-wait", "ddp-memory"} <= set(views.DRAWINGS)
    assert {"stuck-ranks", "zero-stages"} <= set(views.VIEWS)


# ---------------------------------------------------------------------------------------------
# Chapter 7: the figures compute what the chapter's block computes
# ---------------------------------------------------------------------------------------------
def test_hide_or_wait_draws_the_chapters_model(model):
    assert (model["P"], model["S"]) == (figures.PARAMS, figures.GRAD_BYTES)
    assert (model["BUS"], model["FLOPS"]) == (figures.BUS_BYTES_PER_S, figures.FLOPS)
    rows = figures.strong_scaling()
    assert rows[0]["gpus"] == model["WORLD"], "the first row is the chapter's example"
    for row in rows:
        assert row["gpus"] * row["tokens"] == figures.GLOBAL_TOKENS, "the global batch is fixed"
        back = model["backward_seconds"](model["P"], row["tokens"], model["FLOPS"])
        reduce = model["allreduce_seconds"](model["S"], row["gpus"], model["BUS"])
        assert row["backward_ms"] == pytest.approx(1e3 * back)
        assert row["allreduce_ms"] == pytest.approx(1e3 * reduce)
    verdicts = [figures.verdict(r) == "hidden" for r in rows]
    assert True in verdicts and False in verdicts, "the figure should show where hiding stops"


def test_hide_or_wait_bars_are_drawn_to_one_scale():
    rows = figures.strong_scaling()
    values = [r[k] for r in rows for k in ("backward_ms", "allreduce_ms")]
    widths = rect_widths(figures.hide_or_wait())[: len(values)]  # the key's swatches follow
    scale = widths[0] / values[0]
    assert widths == pytest.approx([v * scale for v in values], abs=0.06)


def test_ddp_memory_adds_up_as_chapter_7_counts(model):
    (default, views, bf16) = [parts for _, parts in figures.ddp_rank_bytes()]
    state = model["training_state_bytes"](1)
    assert sum(b for _, b in default) == state + model["ddp_bucket_bytes"](1, 4) == 20
    assert sum(b for _, b in views) == state == 16
    assert sum(b for kind, b in bf16 if kind != "DDP's bucket copy") == state
    assert dict(bf16)["DDP's bucket copy"] == dict(bf16)["gradients"] == 2, "bf16 buckets"
    widths = rect_widths(figures.ddp_memory())
    drawn_bytes = [b for _, parts in figures.ddp_rank_bytes() for _, b in parts]
    scale = widths[0] / drawn_bytes[0]
    assert widths[: len(drawn_bytes)] == pytest.approx([b * scale for b in drawn_bytes], abs=0.06)


# ---------------------------------------------------------------------------------------------
# Chapter 8: the ZeRO stages, byte for byte from the record
# ---------------------------------------------------------------------------------------------
def expected_stages(result, world=4):
    """Per stage, per rank: (weights, gradients, Adam's state), read from the record here."""
    (run,) = [r for r in result["runs"] if r["world_size"] == world]
    ranks = run["ranks"]
    return [
        [(r["param_bytes"], r["grad_bytes"], r["state"]["adam"]["total"]) for r in ranks],
        [(r["param_bytes"], r["grad_bytes"], r["state"]["zero"]["total"]) for r in ranks],
        # ZeRO-2: ZeRO-1's measurement, with only the gradients of the rank's own tensors
        [
            (r["param_bytes"], r["state"]["zero"]["exp_avg"], r["state"]["zero"]["total"])
            for r in ranks
        ],
        [
            (r["fsdp"]["param_bytes"], r["fsdp"]["grad_bytes"], r["fsdp"]["state"]["total"])
            for r in ranks
        ],
    ]


def drawn_stage_bytes(markup, world=4):
    """The bars' widths, back in bytes: the widest rank's total is the largest in the record."""
    widths = rect_widths(markup)
    stages, per_stage = [], 3 * world
    for s in range(len(widths) // per_stage):
        block = widths[s * per_stage : (s + 1) * per_stage]
        stages.append([tuple(block[3 * r : 3 * r + 3]) for r in range(world)])
    return stages


def test_zero_stages_draw_the_records_bytes(zero, drawn):
    expected = expected_stages(zero)
    markup = drawn["zero-stages"]
    bars = drawn_stage_bytes(markup)[: len(expected)]
    assert len(bars) == len(expected), "DDP, ZeRO-1, ZeRO-2 and FSDP2"
    scale = bars[0][0][0] / expected[0][0][0]
    for stage_bars, stage_bytes in zip(bars, expected, strict=True):
        for rank_bars, rank_bytes in zip(stage_bars, stage_bytes, strict=True):
            assert rank_bars == pytest.approx([max(b * scale, 0.5) for b in rank_bytes], abs=0.06)
    totals = [t for t in texts(markup) if t.endswith("KiB")]
    assert totals == [figures.kib(sum(r)) for stage in expected for r in stage]


def test_zero_two_keeps_ddps_traffic_not_half(drawn):
    markup = drawn["zero-stages"]
    assert "reduce-scatter + all-gather: DDP's traffic" in texts(markup)
    assert "half" not in markup.lower()


def test_zero_figure_with_a_stage_mixed_up_is_caught(zero):
    swapped = json.loads(json.dumps(zero))
    for run in swapped["runs"]:
        for rank in run["ranks"]:
            rank["state"]["zero"], rank["state"]["adam"] = (
                rank["state"]["adam"],
                rank["state"]["zero"],
            )
    markup = figures.zero_stages_figure(swapped, "fig-test")
    totals = [t for t in texts(markup) if t.endswith("KiB")]
    assert totals != [figures.kib(sum(r)) for stage in expected_stages(zero) for r in stage]


# ---------------------------------------------------------------------------------------------
# Chapter 6: where each rank waits, from the py-spy dumps
# ---------------------------------------------------------------------------------------------
def test_stuck_ranks_marks_each_rank_where_its_dump_says(stuck, drawn):
    grid = figures.stuck_grid(stuck)
    for column, rank in enumerate(stuck["ranks"]):
        (row,) = [row for row in grid if row["line"] == rank["line"]]
        assert row["collective"] == rank["collective"]
        assert row["cells"][column] == "waits"
    markup = drawn["stuck-ranks"]
    assert texts(markup).count("waits here") == len(stuck["ranks"])
    for rank in stuck["ranks"]:
        said = f"rank {rank['rank']} waits in {rank['collective']} at {rank['file']}:{rank['line']}"
        assert said in markup
    assert "different collectives" in markup, "the recorded ranks wait in different calls"


def test_stuck_ranks_in_one_call_point_elsewhere(stuck):
    same = json.loads(json.dumps(stuck))
    for rank in same["ranks"]:
        rank["line"], rank["collective"] = 69, "barrier"
    words = figures.stuck_words(same)
    assert "same call" in words and "different" not in words
    assert [row["cells"] for row in figures.stuck_grid(same)] == [["waits", "waits"]]
