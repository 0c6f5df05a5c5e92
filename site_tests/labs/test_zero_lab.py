"""ZeRO-1 beside DDP, and one FSDP2 step (code/past_ddp/zero_lab.py): the claims its report makes.

The script runs once, as the build runs it for chapter 8 (2 and 4 gloo ranks; conftest.py's
lab_record, so that under `nox -s tests` the page and the tests share it), and the tests read
its JSON:
the state each rank keeps, the parameters of both methods, the collectives of each step, the
shards of fully_shard. The last tests break a claim on purpose and expect the lab's own check
to refuse it, and try the collective counter and the argument check in this process.
"""

import copy
import importlib
import os
import re
import subprocess
import sys

import pytest

from site_tests.conftest import ROOT, pace

SCRIPT = ROOT / "code" / "past_ddp" / "zero_lab.py"


@pytest.fixture(scope="module")
def lab():
    sys.path.insert(0, str(SCRIPT.parent))
    return importlib.import_module("zero_lab")


@pytest.fixture(scope="module")
def run(lab_record):
    record = lab_record("zero")
    return record["stdout"], record["result"]


def test_each_zero_rank_keeps_less_and_the_shards_add_up_to_adams_state(run):
    _, result = run
    assert [r["world_size"] for r in result["runs"]] == [2, 4]
    for world in result["runs"]:
        ranks = world["ranks"]
        unsharded = ranks[0]["state"]["adam"]["total"]
        assert all(r["state"]["adam"]["total"] == unsharded for r in ranks)
        assert all(r["state"]["zero"]["total"] < unsharded for r in ranks)
        # each moment lives only on the rank that owns its parameter: the union is the whole
        assert sum(r["state"]["zero"]["total"] for r in ranks) == unsharded


def test_ownership_covers_each_parameter_once_and_the_moments_follow_it(run):
    _, result = run
    size = {p["name"]: p for p in result["parameters"]}
    for world in result["runs"]:
        owned = [name for r in world["ranks"] for name in r["owned"]]
        assert sorted(owned) == sorted(size)
        for r in world["ranks"]:
            assert r["owned_elements"] == sum(size[n]["elements"] for n in r["owned"])
            state = r["state"]["zero"]
            assert (
                state["exp_avg"] == state["exp_avg_sq"] == sum(size[n]["bytes"] for n in r["owned"])
            )
            assert state["step"] == 4 * len(r["owned"])  # one float32 step counter per tensor
    # whole tensors only: the largest holds most of the model, so one rank keeps it alone
    largest = max(result["parameters"], key=lambda p: p["elements"])["name"]
    assert all([largest] in [r["owned"] for r in world["ranks"]] for world in result["runs"])


def test_zero_parameters_equal_plain_ddp_adam_to_the_last_bit(run):
    _, result = run
    for world in result["runs"]:
        for r in world["ranks"]:
            assert 0 < r["tolerance"] < 1e-6, "the tolerance must stay at rounding size"
            # the same averaged gradients and elementwise Adam: nothing to round differently
            assert r["max_abs_diff"] == 0.0


def test_the_zero_step_broadcasts_every_parameter_and_adams_step_calls_nothing(run):
    _, result = run
    every, steps = sum(p["bytes"] for p in result["parameters"]), result["steps"]
    for world in result["runs"]:
        for r in world["ranks"]:
            assert len(r["collectives"]["adam"]) == len(r["collectives"]["zero"]) == steps
            assert all(step == {} for step in r["collectives"]["adam"])
            for step in r["collectives"]["zero"]:
                assert step["broadcast"]["calls"] == len(result["parameters"])
                assert step["broadcast"]["bytes"] == every


def test_fully_shard_splits_dim_0_and_matches_ddp_within_rounding(run):
    stdout, result = run
    every = sum(t["bytes"] for t in result["parameters"])
    for world in result["runs"]:
        p, ranks = world["world_size"], world["ranks"]
        if not ranks[0]["fsdp"]["supported"]:
            assert "no FSDP2 fully_shard in this release" in stdout
            continue
        for i, param in enumerate(result["parameters"]):
            rows = [r["fsdp"]["local_shapes"][i] for r in ranks]
            assert sum(shape[0] for shape in rows) == param["shape"][0]
            assert all(shape[1:] == param["shape"][1:] for shape in rows)
        assert sum(r["fsdp"]["param_bytes"] for r in ranks) == every
        for r in ranks:
            fsdp = r["fsdp"]
            assert fsdp["placements"] == ["(Shard(dim=0),)"]
            assert fsdp["state"]["exp_avg"] == fsdp["param_bytes"] == fsdp["grad_bytes"]
            assert fsdp["grad_max_abs_diff"] <= fsdp["grad_tolerance"] < 1e-6
            assert fsdp["beyond_adam_slope"] <= 0
            if p == 2:  # the division by 2 is exact and two addends commute: no rounding at all
                assert fsdp["grad_max_abs_diff"] == fsdp["param_max_abs_diff"] == 0.0


def test_what_chapter_8_says_of_the_shares_and_of_fsdps_traffic(run):
    _, result = run
    every = sum(t["bytes"] for t in result["parameters"])
    elements = sum(t["elements"] for t in result["parameters"])
    for world in result["runs"]:
        p, ranks = world["world_size"], world["ranks"]
        # "the rank that gets it holds most of the state at 2 ranks and at 4 alike"
        adam = ranks[0]["state"]["adam"]["total"]
        assert max(r["state"]["zero"]["total"] for r in ranks) > adam / 2
        if not ranks[0]["fsdp"]["supported"]:
            continue
        for r in ranks:
            fsdp = r["fsdp"]
            stored = fsdp["param_bytes"] + fsdp["grad_bytes"] + fsdp["state"]["total"]
            # "16 bytes divided by p", up to dim 0's uneven cut and Adam's step counters
            assert stored / elements == pytest.approx(16 / p, rel=0.01)
            gathered = fsdp["collectives"]["all_gather_single"]["bytes"]
            scattered = fsdp["collectives"]["reduce_scatter_single"]["bytes"]
            # "about twice the model" gathered, "one model" reduce-scattered (padding aside)
            assert gathered / every == pytest.approx(2, rel=0.01)
            assert scattered / every == pytest.approx(1, rel=0.01)


# What chapter 8's ZeRO-2 bullet says its traffic is, as a share of DDP's all-reduce.
TRAFFIC_CLAIMS = {"half the traffic": 0.5, "the same traffic": 1.0, "twice the traffic": 2.0}


def test_what_chapter_8_says_of_zero2s_traffic(run):
    """ZeRO-2 trades DDP's all-reduce for a reduce-scatter of the gradients and, after each
    rank's step, an all-gather of the updated parameters. The FSDP2 step measures both: its
    reduce-scatter carries the model's gradients once, each of its two all-gather passes the
    model's weights once. Together they are one all-reduce's two phases (chapter 2's ring):
    the bullet must say what that ratio is."""
    _, result = run
    every = sum(t["bytes"] for t in result["parameters"])
    ratios = []
    for world in result["runs"]:
        for r in world["ranks"]:
            if not r["fsdp"]["supported"]:
                continue
            counted = r["fsdp"]["collectives"]
            one_gather = counted["all_gather_single"]["bytes"] / 2  # forward, then backward
            scattered = counted["reduce_scatter_single"]["bytes"]
            ratios.append((scattered + one_gather) / (2 * every))  # all-reduce: both phases
    if not ratios:
        pytest.skip("no FSDP2 fully_shard in this release: nothing measured the two halves")
    chapter = (ROOT / "docs" / "chapters" / "08-past-ddp.md").read_text(encoding="utf-8")
    # The paragraph that opens with **ZeRO-2**, up to the one on ZeRO-3.
    told = " ".join(chapter.split("**ZeRO-2**", 1)[1].split("**ZeRO-3**", 1)[0].split())
    stated = [ratio for words, ratio in TRAFFIC_CLAIMS.items() if words in told]
    assert len(stated) == 1, f"the ZeRO-2 paragraph should name its traffic once: {told}"
    for measured in ratios:
        assert measured == pytest.approx(stated[0], rel=0.01), (measured, told)
    assert "all-gather" in told, "the updated parameters still travel: an all-gather"


def test_the_report_has_its_blocks_and_prints_the_measured_bytes(run):
    stdout, result = run
    blocks = re.findall(r"^== ([\w-]+) ==$", stdout, re.MULTILINE)
    assert blocks == ["model", "state", "equal", "collectives", "fsdp"]
    assert stdout.startswith("== model ==")
    adam = result["runs"][0]["ranks"][0]["state"]["adam"]["total"]
    assert f"ZeRO-1's state on all ranks {adam:,} B; plain Adam's {adam:,} B" in stdout
    assert max(map(len, stdout.splitlines())) <= 88, "lab output goes into a page's code block"


# ---------------------------------------------------------------------------------------------
# Breaking the claims on purpose
# ---------------------------------------------------------------------------------------------
BREAKS = {  # what the lab must say, and how the record is broken to make it say so
    "cover each parameter once": lambda r: r["runs"][0]["ranks"][1]["owned"].append("0.bias"),
    "differ from DDP + Adam's": lambda r: r["runs"][1]["ranks"][3].update(max_abs_diff=1e-6),
    "called no collective": lambda r: r["runs"][0]["ranks"][1]["collectives"]["zero"][-1].clear(),
    "does not add up": lambda r: r["runs"][1]["ranks"][2]["state"]["zero"].update(total=4),
}


@pytest.mark.teeth
@pytest.mark.parametrize("caught", BREAKS)
def test_the_lab_refuses_a_record_that_breaks_a_claim(lab, run, caught):
    _, result = run
    assert lab.claim_failures(result) == []
    broken = copy.deepcopy(result)
    BREAKS[caught](broken)
    assert any(caught in failure for failure in lab.claim_failures(broken))


def test_counting_puts_the_collectives_back_even_after_an_error(lab, one_rank_group):
    import torch
    import torch.distributed as dist

    original = dist.broadcast
    with pytest.raises(RuntimeError), lab.counting_collectives() as counts:
        dist.broadcast(torch.ones(3), src=0)
        raise RuntimeError("inside")
    assert counts == {"broadcast": {"calls": 1, "bytes": 12}}
    assert dist.broadcast is original


def test_bad_world_sizes_are_refused_before_torch_is_imported(torch_refuses):
    env = dict(os.environ, PYTHONPATH=str(torch_refuses))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--world-sizes", "2,1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=pace.limit(30),
    )
    assert proc.returncode == 2 and "between 2 and 8" in proc.stderr
