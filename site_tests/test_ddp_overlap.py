"""DDP's overlap timeline (code/ddp/ddp_overlap.py): a consistent measurement, drawn from its numbers.

Reads the record that the real build's run left in its lab cache and the module page built from
it. The timings themselves are the machine's business and are never asserted; what is asserted
is what any honest timeline of this program must satisfy (causality, every gradient reduced
once, the same gradients both ways) and that the figure says what the record says.
"""

import html
import importlib
import json
import re
import sys

import pytest

from site_tests.conftest import ROOT


@pytest.fixture(scope="module")
def overlap(built_site):
    site, cache = built_site
    (folder,) = cache.glob("overlap-*/")
    result = json.loads((folder / "record.json").read_text())["result"]
    markup = (site / "chapters" / "03-ddp" / "index.html").read_text(encoding="utf-8")
    return result, markup


def shown(result, method):
    return result[method]["runs"][result[method]["shown"]]


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


def figure_views():
    """hooks/figure_views.py, which draws the figure and writes its verdict."""
    if str(ROOT / "hooks") not in sys.path:
        sys.path.insert(0, str(ROOT / "hooks"))
    return importlib.import_module("figure_views")


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


def test_the_verdict_compares_in_the_direction_the_numbers_go():
    """Which step ended first is the record's to say: the issue that added this test saw DDP's
    step 3.7 ms behind the naive loop's, under prose that called the naive loop the slow one."""

    def record(ddp_ready, ddp_step, naive_ready, naive_step, pinned=True):
        def runs(ready, step):
            return {"runs": [{"ready": {"0.weight": ready}, "step_s": step}], "shown": 0}

        return {
            "ddp": runs(ddp_ready, ddp_step),
            "naive": runs(naive_ready, naive_step),
            "cores": {"available": 2, "pinned": pinned},
        }

    slower = figure_views().overlap_verdict(record(0.120, 0.3663, 0.100, 0.3626))
    assert slower.startswith("Each rank ran pinned to one CPU core of its own (2 cores")
    assert "last gradient 20.0 ms later than the naive loop's" in slower
    assert "its step ended 3.7 ms later." in slower
    faster = figure_views().overlap_verdict(record(0.080, 0.101, 0.090, 0.186, pinned=False))
    assert faster.startswith("The ranks ran on CPU cores the operating system chose")
    assert "10.0 ms earlier than the naive loop's" in faster
    assert "its step ended 85.0 ms earlier." in faster


def rebuilt_in_ready_order(result):
    """Do the buckets DDP kept, read in launch order, list the parameters in the order their
    gradients became ready on the first backward? (The rebuild's whole point.)"""
    first = result["first_iteration"]
    arrived = sorted(first["ready"], key=first["ready"].get)
    return all(
        [name for b in sorted(run["buckets"], key=lambda b: b["index"]) for name in b["params"]]
        == arrived
        for run in result["ddp"]["runs"]
    )


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


def buckets(result):
    later = result["ddp"]["runs"][result["ddp"]["shown"]]["buckets"]
    return (
        sorted(result["first_iteration"]["buckets"], key=lambda b: b["index"]),
        sorted(later, key=lambda b: b["index"]),
    )


def figure_views_figures():
    figure_views()  # puts hooks/ on sys.path
    return importlib.import_module("figures_ddp")


def test_the_rebuild_check_catches_buckets_out_of_arrival_order():
    ready = {"0.weight": 0.2, "2.weight": 0.1}
    run = {"buckets": [{"index": 0, "params": ["2.weight"]}, {"index": 1, "params": ["0.weight"]}]}
    record = {"first_iteration": {"ready": ready}, "ddp": {"runs": [run]}}
    assert rebuilt_in_ready_order(record)
    run["buckets"][0]["index"], run["buckets"][1]["index"] = 1, 0
    assert not rebuilt_in_ready_order(record)
