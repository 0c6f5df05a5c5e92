"""Chapter 3's overlap lab as the build ran it: the record's buckets and timings, and the
figure and text the chapter draws from them (labs/test_ddp_overlap.py runs the lab itself)."""

import html
import re
from site_tests.labs.test_ddp_overlap import buckets, figure_views, figure_views_figures, overlap, rebuilt_in_ready_order, shown


def test_ddp_buckets_cover_every_parameter_once_and_start_after_their_gradients(overlap):
    result, _ = overlap
    names = [p["name"] for p in result["parameters"]]
    for run in result["ddp"]["runs"]:
        reduced = [name for bucket in run["buckets"] for name in bucket["params"]]
        assert sorted(reduced) == sorted(names)
        assert len(run["buckets"]) > 1, "bucket_cap_mb should give several buckets"
        for bucket in run["buckets"]:
            last_ready = max(run["ready"][name] for name in bucket["params"])
            assert last_ready <= bucket["launch_s"] <= bucket["done_s"] <= run["step_s"]
        launched_by_index = [b["index"] for b in run["buckets"]]
        assert launched_by_index == sorted(launched_by_index), "DDP launches in index order"


def test_naive_reduces_each_parameter_after_the_whole_backward(overlap):
    result, _ = overlap
    names = [p["name"] for p in result["parameters"]]
    for run in result["naive"]["runs"]:
        assert [call["param"] for call in run["allreduces"]] == names
        assert max(run["ready"].values()) <= run["backward_s"] <= run["allreduces"][0]["launch_s"]
        ends = [call["done_s"] for call in run["allreduces"]]
        starts = [call["launch_s"] for call in run["allreduces"]]
        assert all(end <= start for end, start in zip(ends, starts[1:], strict=False))
        assert run["step_s"] == ends[-1]
    # Two ranks, and DDP's division by 2 is exact in binary: the sums cannot differ by a bit.
    assert result["grad_max_abs_diff"] == 0.0, "both methods must produce the same gradients"


def test_the_figure_and_its_text_alternative_come_from_the_record(overlap):
    result, markup = overlap
    ddp, naive = shown(result, "ddp"), shown(result, "naive")
    (svg,) = re.findall(r'<svg class="fig-timeline".*?</svg>', markup, re.S)
    (alt,) = re.findall(r'<title id="([^"]+)">(.*?)</title>', svg)
    assert f'aria-labelledby="{alt[0]}"' in svg and 'role="img"' in svg
    words = html.unescape(alt[1])
    for value in (
        ddp["step_s"],
        naive["step_s"],
        ddp["buckets"][0]["launch_s"],
        max(b["done_s"] for b in ddp["buckets"]),
    ):
        assert f"{value * 1e3:.1f} ms" in words
    assert f"{len(ddp['buckets'])} bucket all_reduces" in words
    assert f"{len(naive['allreduces'])} all_reduces ran one after another" in words
    bars = svg.count("fig-bar--comm")
    assert bars == len(ddp["buckets"]) + len(naive["allreduces"])


def test_the_page_says_where_the_ranks_ran_and_compares_as_the_record_does(overlap):
    result, markup = overlap
    ddp, naive = shown(result, "ddp"), shown(result, "naive")
    assert result["cores"]["pinned"], "the build machine has a core for each rank"
    verdict = figure_views().overlap_verdict(result)
    # as a reader sees it: the page's abbreviations wrap "DDP" and "CPU" in tags of their own
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", markup)))
    assert verdict in text
    step = ddp["step_s"] - naive["step_s"]
    ended = f"{abs(step) * 1e3:.1f} ms {'later' if step > 0 else 'earlier'}"
    assert f"its step ended {ended}." in verdict


def test_ddp_rebuilt_its_buckets_in_the_order_the_first_gradients_arrived(overlap):
    result, markup = overlap
    first = result["first_iteration"]
    assert len(first["buckets"]) == result["first_iteration_buckets"] == 1
    arrived = sorted(first["ready"], key=first["ready"].get)
    registered = [p["name"] for p in result["parameters"]]
    assert arrived[0].startswith(f"{2 * (result['layers'] - 1)}."), "the last layer first"
    assert arrived != registered
    assert rebuilt_in_ready_order(result)
    # the chapter's figure draws this record: its text alternative lists the rebuilt buckets
    words = html.unescape(figure_views_figures().buckets_alt(result, registered, *buckets(result)))
    assert words in html.unescape(markup)
