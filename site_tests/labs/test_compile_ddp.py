"""torch.compile with DDP (code/past_ddp/compile_ddp.py): what chapter 8 says, against its runs.

The graphs and the two orders are checked on a run of the lab's own (--skip-inductor: seconds),
so that the release matrix checks them on every release; inductor's timing and the chapter are
checked on the record that the real build's run left in its lab cache. Compile times are the
machine's business; only their order is asserted. The lab's check() is the script's verdict on
its claims, so each claim is also broken here, once, to see that check() refuses it.
"""

import html
import json
import re
import subprocess
import sys

import pytest

from site_tests.conftest import ROOT, pace

sys.path.insert(0, str(ROOT / "code" / "past_ddp"))
import compile_ddp  # noqa: E402

WITH_DDP, OTHER_ORDER, NO_DDP = compile_ddp.ORDERS


@pytest.fixture(scope="module")
def graphs_run(tmp_path_factory):
    """The lab without its inductor part, run here, on the torch under test."""
    out = tmp_path_factory.mktemp("compile") / "compile.json"
    proc = subprocess.run(
        [sys.executable, "code/past_ddp/compile_ddp.py", "--skip-inductor", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def compiled(built_site):
    site, cache = built_site
    (folder,) = cache.glob("compile-ddp-*/")
    result = json.loads((folder / "record.json").read_text())["result"]
    markup = (site / "chapters" / "08-past-ddp" / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", markup)))
    return result, text


def test_one_graph_per_bucket_of_one_layer_and_more_graphs_than_buckets_at_an_explicit_25(
    graphs_run,
):
    result = graphs_run
    small, large = result["graphs"][:2]
    assert small == {"bucket_cap_mb": 1, "graphs": result["layers"], "buckets": result["layers"]}
    # the page: at 25 MiB every layer fits in one bucket, yet dynamo compiles more graphs
    assert large["bucket_cap_mb"] == 25 and large["buckets"] == 1 < large["graphs"]


def test_dynamo_cuts_at_ddps_default_first_bucket_whether_or_not_a_cap_is_passed(graphs_run):
    """Chapter 3: only DDP's defaults keep a small first bucket; an explicit 25 turns it off.
    Dynamo hands DDPOptimizer DDP's cap alone, so its first graph is cut at the default 1 MiB
    either way: the graphs match the buckets at the default, not at an explicit 25."""
    explicit, default = result_rows = graphs_run["graphs"][1:]
    assert [row["bucket_cap_mb"] for row in result_rows] == [25, None]
    assert default["buckets"] == default["graphs"] > 1, "the default keeps a small first bucket"
    assert explicit["graphs"] == default["graphs"], "the graphs do not see the explicit cap"
    assert explicit["buckets"] < explicit["graphs"]


def test_both_orders_give_eager_ddps_gradients_and_the_control_does_not(graphs_run):
    result = graphs_run
    orders = {row["order"]: row for row in result["orders"]}
    assert list(orders) == [WITH_DDP, OTHER_ORDER, NO_DDP]
    for order in (WITH_DDP, OTHER_ORDER):
        assert orders[order]["graphs"] == result["layers"], order
        assert orders[order]["grad_vs_eager"] == 0.0 and orders[order]["rank_diff"] == 0.0
    assert orders[NO_DDP]["rank_diff"] > 0.0
    # the names a checkpoint gets: both wrappers' prefixes, in the order of wrapping
    assert orders[WITH_DDP]["first_key"].startswith("_orig_mod.module.")
    assert orders[OTHER_ORDER]["first_key"].startswith("module._orig_mod.")


def test_skip_inductor_leaves_out_its_part_only(graphs_run):
    assert graphs_run["inductor"] is None and compile_ddp.check(graphs_run) is None
