"""The figures of chapters 2 to 4 (hooks/views/figures_ddp.py): drawn from what they claim to draw.

No site is built and no rank is spawned: the collectives figure is drawn from a tour made from
code/ddp/ring_allreduce.py's own expectation, the buckets figure from a small record shaped like
code/ddp/ddp_overlap.py's, and the sampler's split is compared with torch's DistributedSampler.
"""

import html
import importlib
import importlib.util
import re
import sys

import pytest

from site_tests.conftest import ROOT


def hook(name):
    if str(ROOT / "hooks") not in sys.path:
        sys.path.insert(0, str(ROOT / "hooks"))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def figures():
    return hook("views.figures_ddp")


@pytest.fixture(scope="module")
def ring():
    spec = importlib.util.spec_from_file_location(
        "ring_for_figures", ROOT / "code" / "ddp" / "ring_allreduce.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TEXT = re.compile(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>')


def texts(markup):
    """Every <text> of a figure: (x, y, words)."""
    return [(float(x), float(y), html.unescape(words)) for x, y, words in TEXT.findall(markup)]


def alt_of(markup):
    (words,) = re.findall(r"<title id=\"[^\"]+\">(.*?)</title>", markup, re.S)
    return html.unescape(words)


# ---------------------------------------------------------------------------------------------
# Chapter 2: the collectives
# ---------------------------------------------------------------------------------------------
def tour_record(ring, p):
    """A tour as the lab records it, from the lab's own expectation of each call."""
    x = ring.tour_inputs(p)

    def one(r):
        return [x[r][r] if j == r else None for j in range(p)]

    befores = {call: [list(row) for row in x] for call in ring.expected_tour(p)}
    befores["all_gather"] = befores["gather"] = [one(r) for r in range(p)]
    befores["scatter"] = [x[0]] + [None] * (p - 1)
    roots = {"broadcast": 0, "reduce": 0, "gather": 0, "scatter": 0}
    return {
        call: {"root": roots.get(call), "before": befores[call], "after": after}
        for call, after in ring.expected_tour(p).items()
    }


@pytest.fixture(scope="module")
def collectives(figures, ring):
    tour = tour_record(ring, 4)
    return tour, figures.collectives_figure(tour, 4, "t")


def test_every_slot_drawn_is_a_number_the_ranks_held(collectives, figures):
    tour, markup = collectives
    drawn = sorted(int(w) for _, _, w in texts(markup) if w.isdigit())
    held = sorted(
        v
        for entry in tour.values()
        for side in ("before", "after")
        for row in entry[side]
        if row is not None
        for v in row
        if v is not None
    )
    assert drawn == held


def test_the_collectives_alt_text_states_each_ranks_numbers(collectives):
    tour, markup = collectives
    words = alt_of(markup)
    assert "all_reduce. Before: rank 0 0, 1, 2, 3; rank 1 10, 11, 12, 13;" in words
    assert "After: rank 0 60, 64, 68, 72; rank 1 60, 64, 68, 72;" in words
    assert "reduce_scatter. Before:" in words and "rank 2 chunk 2 only: 68;" in words
    assert "reduce, to rank 0. Before:" in words and "rank 1 undefined;" in words
    assert "scatter, from rank 0. Before: rank 0 0, 1, 2, 3; rank 1 none;" in words
    assert "all_to_all. Before:" in words and "After: rank 0 0, 10, 20, 30; rank 1 1, 11" in words
    for call in tour:
        assert f" {call}" in words


def test_sums_are_orange_and_copies_blue(collectives):
    tour, markup = collectives
    primary = markup.count("fig-fill--primary fig-stroke")
    accent = markup.count("fig-fill--accent fig-stroke")
    # all_reduce 16 sums, reduce 4 on rank 0, reduce_scatter 1 per rank; the key adds one each
    assert primary == 16 + 4 + 4 + 1
    # broadcast 12, all_gather 12, all_to_all 12, gather 3, scatter 3
    assert accent == 12 + 12 + 12 + 3 + 3 + 1


# ---------------------------------------------------------------------------------------------
# Chapter 3: the buckets
# ---------------------------------------------------------------------------------------------
def overlap_record(layers=3):
    names = [f"{2 * k}.{kind}" for k in range(layers) for kind in ("weight", "bias")]
    ready = {name: 1.0 - i / 10 for i, name in enumerate(names)}  # the last registered first
    later = [
        {"index": i, "params": [f"{2 * k}.bias", f"{2 * k}.weight"], "bytes": 2**20}
        for i, k in enumerate(reversed(range(layers)))
    ]
    return {
        "layers": layers,
        "bucket_cap_mb": 1.0,
        "world_size": 2,
        "parameters": [{"name": n, "layer": int(n.split(".")[0]) // 2} for n in names],
        "first_iteration": {
            "ready": ready,
            "buckets": [{"index": 0, "params": names, "bytes": layers * 2**20}],
        },
        "ddp": {"runs": [{"ready": ready, "buckets": later}], "shown": 0},
    }


def test_each_row_shows_when_its_gradient_was_ready(figures):
    record = overlap_record()
    drawn = texts(figures.buckets_figure(record, "b"))
    rows = {words: y for x, y, words in drawn if x == 0}
    order = figures.ready_order(record["first_iteration"])
    for name, place in order.items():
        on_row = [w for x, y, w in drawn if y == rows[name] and x > 0]
        assert on_row == [figures.ordinal(place)], name
    assert order["4.bias"] == 1 and order["0.weight"] == 6


def test_each_bucket_is_drawn_beside_its_parameters(figures):
    record = overlap_record()
    markup = figures.buckets_figure(record, "b")
    drawn = texts(markup)
    rows = {words: y for x, y, words in drawn if x == 0}
    labels = [(x, y, w) for x, y, w in drawn if w.startswith("bucket ")]
    later_x = max(x for x, _, _ in labels)
    for bucket in record["ddp"]["runs"][0]["buckets"]:
        (y,) = [y for x, y, w in labels if x == later_x and w == f"bucket {bucket['index']}"]
        ys = [rows[name] for name in bucket["params"]]
        assert min(ys) - 13 <= y <= max(ys) + 13, bucket
    words = alt_of(markup)
    assert "bucket 0 (1.00 MiB): 4.bias, 4.weight" in words
    assert "Iteration 1 used 1 bucket: bucket 0 (3.00 MiB)" in words
    assert "became ready in this order: 4.weight, 4.bias" not in words
    assert "became ready in this order: 4.bias, 4.weight, 2.bias" in words


# ---------------------------------------------------------------------------------------------
# Chapter 4: DistributedSampler's split
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("n, p", [(10, 3), (10, 4), (12, 4), (3, 5), (7, 2), (1, 3)])
def test_the_split_is_torchs(figures, n, p, drop_last):
    from torch.utils.data import DistributedSampler

    _, per_rank, dropped = figures.sampler_split(n, p, drop_last)
    for r in range(p):
        sampler = DistributedSampler(range(n), p, r, shuffle=False, drop_last=drop_last)
        assert [index for index, _ in per_rank[r]] == list(sampler), (r, per_rank)
    seen = {index for taken in per_rank for index, _ in taken}
    assert sorted(seen | set(dropped)) == list(range(n))


def test_the_sampler_figure_draws_torchs_split(figures):
    from torch.utils.data import DistributedSampler

    markup = figures.sampler_figure()
    n, p = figures.SAMPLES, figures.RANKS
    words = alt_of(markup)
    drawn = texts(markup)
    rank_rows = [y for x, y, w in drawn if x == 0 and w.startswith("rank ")]
    assert len(rank_rows) == 2 * p  # drop_last=False, then True
    for k, y in enumerate(rank_rows):
        rank, drop_last = k % p, k >= p
        expected = list(DistributedSampler(range(n), p, rank, shuffle=False, drop_last=drop_last))
        on_row = [int(w) for x, yy, w in sorted(drawn) if yy == y and w.isdigit()]
        assert on_row == expected, (rank, drop_last)
        assert f"rank {rank} takes {', '.join(map(str, expected))}" in words
    assert "padded to 12 by repeating 0, 1" in words and "dropping 9" in words


# ---------------------------------------------------------------------------------------------
# All three: a figure with a caption, a key and a text alternative, legible on a phone
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def all_three(figures, collectives):
    return {
        "collectives": collectives[1],
        "buckets": figures.buckets_figure(overlap_record(6), "b"),
        "sampler": figures.sampler_figure(),
    }


@pytest.mark.parametrize("name", ["collectives", "buckets", "sampler"])
def test_legible_on_a_phone_and_complete(all_three, name):
    kit = hook("views.common")
    markup = all_three[name]
    (root,) = re.findall(r"<svg class=\"fig-diagram\"[^>]*>", markup)
    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', root)[1])
    font = float(re.search(r'font-size="([\d.]+)"', root)[1])
    smaller = [float(s) for s in re.findall(r'<text[^>]*font-size="([\d.]+)"', markup)]
    smallest = min([font, *smaller])
    assert smallest * kit.PHONE_COLUMN_PX / width >= kit.LEGIBLE_PX, (smallest, width)
    assert "fig-scroll__hint" not in markup, "fits a phone: no sideways scroll"
    (label,) = re.findall(r'aria-labelledby="([^"]+)"', root)
    assert f'<title id="{label}">' in markup and 'role="img"' in root
    assert re.search(r"<figcaption>[^<]{40,}</figcaption>", markup)
    assert markup.count("<li>") >= 3 and 'class="fig-key"' in markup
