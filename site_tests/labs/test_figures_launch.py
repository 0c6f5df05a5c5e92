"""The figures of hooks/views/figures_launch.py: chapter 1's ranks on 2 nodes x 4 GPUs, chapter 5's
rendezvous and the Slurm launch tree, drawn from the committed lab records.

Nothing here runs a lab or builds the site: each figure is drawn from code or from the record
its page reads, and checked for what it claims (the numbers it draws are the record's and are
all in its text alternative) and for how it must look (legible on a phone, a caption, a key).
"""

import html
import json
import re
import sys
import types

import pytest

from site_tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))
import views  # noqa: E402
from views import common, figures_launch  # noqa: E402

RECORDS = ROOT / "docs" / "labs" / "recorded"


def context(run, record):
    result = json.loads((RECORDS / record).read_text())["result"]
    return types.SimpleNamespace(run=types.SimpleNamespace(name=run), result=result)


@pytest.fixture(scope="module")
def two_nodes():
    return context("two-nodes", "two_nodes.json")


@pytest.fixture(scope="module")
def slurm():
    return context("slurm", "slurm.json")


@pytest.fixture(scope="module")
def figures(two_nodes, slurm):
    return {
        "ranks-2x4": figures_launch.ranks_figure(),
        "nodes-rendezvous": figures_launch.rendezvous_view(two_nodes),
        "slurm-tree": figures_launch.tree_view(slurm),
    }


def main_svg(markup):
    """The figure's drawing (not its key's swatches)."""
    return re.search(r'<svg class="fig-diagram".*?</svg>', markup, re.DOTALL)[0]


def alt_of(markup):
    return html.unescape(re.search(r"<title[^>]*>(.*?)</title>", markup, re.DOTALL)[1])


def words_drawn(markup):
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", main_svg(markup))]


# ---------------------------------------------------------------------------------------------
# Every figure
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ranks-2x4", "nodes-rendezvous", "slurm-tree"])
def test_each_figure_has_a_title_a_caption_and_a_key(figures, name):
    markup = figures[name]
    svg = main_svg(markup)
    assert 'role="img"' in svg and re.search(r'aria-labelledby="([^"]+)"', svg)
    labelled = re.search(r'aria-labelledby="([^"]+)"', svg)[1]
    assert f'<title id="{labelled}">' in svg, "the SVG's text alternative is its <title>"
    assert len(alt_of(markup)) > 80
    caption = re.search(r"<figcaption>(.*?)</figcaption>", markup, re.DOTALL)
    assert caption and len(caption[1]) > 40
    keyed = markup[markup.index('<ul class="fig-key">') :]
    for look in ("fig-fill--primary", "fig-fill--accent", "fig-fill--faint", "stroke-dasharray"):
        if look in svg:
            assert look in keyed, f"{name} draws {look} but its key does not say what it means"


@pytest.mark.parametrize("name", ["ranks-2x4", "nodes-rendezvous", "slurm-tree"])
def test_each_figure_is_legible_on_a_phone_without_scrolling(figures, name):
    svg = main_svg(figures[name])
    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg)[1])
    root = float(re.search(r'font-size="([\d.]+)"', svg)[1])
    sizes = [float(s) for s in re.findall(r'<text[^>]*font-size="([\d.]+)"', svg)]
    smallest = min([root, *sizes])
    px = smallest * common.PHONE_COLUMN_PX / width
    assert px >= common.LEGIBLE_PX, f"{name}: {smallest} units in {width} render {px:.1f}px"
    assert "fig-scroll__hint" not in figures[name], "no sideways scrolling on a phone"


@pytest.mark.parametrize("name", ["ranks-2x4", "nodes-rendezvous", "slurm-tree"])
def test_every_number_a_figure_draws_is_in_its_text_alternative(figures, name):
    alt = alt_of(figures[name])
    drawn = {n for words in words_drawn(figures[name]) for n in re.findall(r"[\d.:,]*\d", words)}
    missing = sorted(n for n in drawn if n not in alt)
    assert not missing, f"{name} draws {missing}, which its alt text does not say"


def test_the_pages_show_the_figures_and_the_markers_are_registered():
    pages = {
        "docs/chapters/01-first-job.md": "<!-- figure:ranks-2x4 -->",
        "docs/chapters/05-launching.md": "<!-- lab:two-nodes:nodes-rendezvous -->",
    }
    for page, marker in pages.items():
        assert re.search(f"^{re.escape(marker)}$", (ROOT / page).read_text(), re.MULTILINE)
    chapter5 = (ROOT / "docs/chapters/05-launching.md").read_text()
    slurm_lab = (ROOT / "docs/labs/slurm.md").read_text()
    tree = "<!-- lab:slurm:slurm-tree -->"
    assert (chapter5 + slurm_lab).count(tree) == 1, "the launch tree is shown in one place"
    assert "05-launching.md#on-a-slurm-gpu-cluster" in slurm_lab, "the lab links to it"
    assert "ranks-2x4" in views.DRAWINGS
    assert {"nodes-rendezvous", "slurm-tree"} <= set(views.VIEWS)


# ---------------------------------------------------------------------------------------------
# Chapter 1: 2 nodes x 4 GPUs
# ---------------------------------------------------------------------------------------------
def test_ranks_are_numbered_node_by_node():
    processes = figures_launch.ranks_2x4(2, 4)
    assert [rank for _, _, rank in processes] == list(range(8)), "each rank once, in order"
    for node, local_rank, rank in processes:
        assert (rank // 4, rank % 4) == (node, local_rank)


def test_chapter_1_figure_draws_each_process_with_its_rank_local_rank_and_shard(figures):
    words = words_drawn(figures["ranks-2x4"])
    pairs = [(words[i], words[i + 1]) for i in range(len(words) - 1)]
    for node, local_rank in ((n, lr) for n in range(2) for lr in range(4)):
        rank = node * 4 + local_rank
        assert (f"RANK {rank}", f"LOCAL_RANK {local_rank}") in pairs
        assert f"{rank} of 8" in words, "its own shard"
        assert f"RANK {rank} (LOCAL_RANK {local_rank}, GPU {local_rank})" in alt_of(
            figures["ranks-2x4"]
        )
    assert words.count("replica") == 8 and "(g0 + ... + g7) / 8" in " ".join(words)


# ---------------------------------------------------------------------------------------------
# Chapter 5: the rendezvous, from the two-node lab's record
# ---------------------------------------------------------------------------------------------
def test_rendezvous_figure_draws_the_recorded_endpoint_hosts_and_ranks(figures, two_nodes):
    result = two_nodes.result
    drawn = " | ".join(words_drawn(figures["nodes-rendezvous"]))
    (listening,) = result["parts"]["store"]["listening"]
    port = listening.rsplit(":", 1)[1]
    assert f"node0:{port}" in drawn, "the endpoint, at the port the store listened on"
    for node, address in result["clusters"]["train"]["hosts"].items():
        ranks = [r for r in result["parts"]["train"]["ranks"] if r["node"] == node]
        if not ranks:
            assert node not in drawn, f"{node} took no part in the job"
            continue
        assert f"{node}  {address}" in drawn
        assert f"GROUP_RANK {ranks[0]['group_rank']}" in drawn
        for r in ranks:
            assert f"worker RANK {r['rank']} | LOCAL_RANK {r['local_rank']}" in drawn
    assert "MASTER_PORT" in drawn and not re.search(r"MASTER_PORT\W+\d", drawn), (
        "the record keeps no MASTER_PORT: the figure must not show a number for it"
    )


def test_the_rendezvous_endpoint_is_read_from_the_command():
    command = "torchrun --nnodes=2 --rdzv_endpoint=node7:29411 --rdzv_id=x train.py"
    assert figures_launch.endpoint_of(command) == ("node7", 29411)


# ---------------------------------------------------------------------------------------------
# The Slurm launch tree, from the Slurm lab's record
# ---------------------------------------------------------------------------------------------
def test_launch_tree_draws_the_recorded_job_tasks_and_workers(figures, slurm):
    job = slurm.result["jobs"]["torchrun"]
    words = words_drawn(figures["slurm-tree"])
    assert f"sbatch {job['sbatch'].split()[-2]}" in words, "the job script it submitted"
    assert f"job {job['id']} on nodes {job['show_job']['NodeList']}" in words
    for task in job["tasks"]:
        assert f"task {task['task']} on {task['host']}" in words
        assert f"GPUs {task['visible']} visible" in words
    first_start = [r for r in job["ranks"] if r["resume_step"] == 0]
    assert sum(w.startswith("RANK ") for w in words) == len(first_start)
    for r in first_start:
        i = words.index(f"RANK {r['rank']}")
        assert words[i + 1 : i + 3] == [f"LOCAL_RANK {r['local_rank']}", f"device {r['device']}"]


def test_launch_tree_puts_each_worker_under_the_agent_of_its_group_rank(slurm):
    tree = figures_launch.launch_tree(slurm.result["jobs"]["torchrun"])
    for agent in tree["agents"]:
        ranks = {
            r["rank"]
            for r in slurm.result["jobs"]["torchrun"]["ranks"]
            if r["group_rank"] == agent["group_rank"]
        }
        assert {rank for rank, _, _ in agent["workers"]} == ranks
    assert [a["host"] for a in tree["agents"]] == sorted(a["host"] for a in tree["agents"])


def test_launch_tree_stays_small_for_the_slurm_page(figures):
    # The Slurm lab's page is near its 1 MB budget; the tree may add a few KB, no more.
    assert len(figures["slurm-tree"].encode()) < 8_000
