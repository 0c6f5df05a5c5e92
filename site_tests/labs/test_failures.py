"""The failure gallery: every script shows its failure in time, then its fix, and leaves nothing.

Each script in code/failures/ runs once, as the build runs it for the page (mkdocs.yml's fail-*
runs, through conftest.py's lab_record): `python SCRIPT --json PATH` with a TMPDIR of its own, in
a session of its own, so that its record says which files and processes it left behind. Under
`nox -s tests` the build beside this session makes the same records, and each script runs once
for both. The runs go two at a time: most of a run is spent importing torch or waiting out a
2 s timeout, so pairs overlap well on two cores. The tests then read the JSON each script
wrote; they recheck the facts the page states instead of trusting the script's own verdict.
"""

import concurrent.futures
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from site_tests.conftest import ROOT, declared, labrunner, pace

FAILURES = ROOT / "code" / "failures"
PAGE = ROOT / "docs" / "failures.md"
SCRIPTS = [
    "rank0_collective",
    "shape_mismatch",
    "unused_param",
    "uneven_inputs",
    "set_epoch",
    "sum_loss",
    "no_broadcast",
    "batchnorm",
    "eval_padding",
]
SINGLE_PROCESS = {"set_epoch", "eval_padding"}  # they need no process group
# Written for pace's reference machine, like every limit of the suite (code/pace.py).
CASE_BOUND_S = 10  # no rank may need longer than this to fail (or to succeed)


# ---------------------------------------------------------------------------------------------
# Each script's run, from its record
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Run:
    stdout: str
    stderr: str
    result: dict
    leftover_files: list
    leftover_processes: list


@pytest.fixture(scope="module")
def runs(lab_record):
    """{script name: Run}, every gallery script run once. A script that exits non-zero, prints
    a traceback or runs past its time fails here, with its own last lines (labrunner)."""
    declared = {pathlib.Path(spec["script"]).stem: name for name, spec in gallery_runs().items()}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {script: pool.submit(lab_record, declared[script]) for script in SCRIPTS}
        records = {script: future.result() for script, future in futures.items()}
    return {
        script: Run(r["stdout"], r["stderr"], r["result"], r["left_files"], r["left_processes"])
        for script, r in records.items()
    }


def gallery_runs():
    """{run name: spec}: mkdocs.yml's lab runs of the gallery's scripts."""
    runs = declared()["lab_runs"]
    return {
        name: spec for name, spec in runs.items() if spec["script"].startswith("code/failures/")
    }


def ranks(run, group):
    return run.result["groups"][group]


# ---------------------------------------------------------------------------------------------
# What every script owes the build
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SCRIPTS)
def test_script_succeeds_and_reports(runs, name):
    run = runs[name]
    assert run.result["as_expected"] and all(run.result["checks"].values()), run.result["checks"]
    assert run.stdout.splitlines() == run.result["printed"]  # the JSON holds the exact lines
    assert "Traceback" not in run.stdout + run.stderr
    assert set(run.result["env"]) >= {"torch", "python", "platform", "cpu_model", "cpu_count"}


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_leaves_nothing_behind(runs, name):
    run = runs[name]
    assert run.leftover_processes == [], f"{name} left processes running"
    # Anything but torch's own compile cache (labrunner.TORCH_OWN) would be the script's.
    assert run.leftover_files == [], f"{name} left files in its temporary directory"


@pytest.mark.parametrize("name", [name for name in SCRIPTS if name not in SINGLE_PROCESS])
def test_every_rank_ends_within_the_bound(runs, name):
    groups = runs[name].result.get("groups") or {"all": runs[name].result["results"]}
    for group, results in groups.items():
        for rank in results:
            assert rank["status"] != "killed", f"{name}/{group}: rank {rank['rank']} hung"
            assert rank["seconds"] <= pace.limit(CASE_BOUND_S), (
                f"{name}/{group}: rank {rank['rank']}"
            )


# ---------------------------------------------------------------------------------------------
# Case by case: the error text (or the wrong numbers) the page describes, and the fix
# ---------------------------------------------------------------------------------------------
def test_rank0_collective(runs):
    run = runs["rank0_collective"]
    barrier = ranks(run, "barrier")
    assert all(r["status"] == "raised" for r in barrier)
    assert any("Timed out waiting" in r["error"] for r in barrier)
    assert not any("rank 0" in r["error"] or "rank 1" in r["error"] for r in barrier)
    monitored = ranks(run, "monitored_barrier")[1]["error"]
    assert "Rank 1 successfully reached monitoredBarrier" in monitored
    assert "from rank 0" in monitored
    assert [r["value"] for r in ranks(run, "fixed")] == [1.5, 1.5]


def test_shape_mismatch(runs):
    run = runs["shape_mismatch"]
    # The common outcome: the smaller rank is killed by SIGABRT, its partner loses the peer.
    survivor, aborted = ranks(run, "abort")
    assert aborted["status"] == "died" and "killed by SIGABRT" in aborted["error"]
    assert "Received data size doesn't match expected size" in aborted["error"]
    assert survivor["status"] == "ok" and "Connection reset by peer" in survivor["value"]["error"]
    for group in ("as_is", "env_in_rank"):  # setting the variable inside the rank changes nothing
        rank0, rank1 = (r["value"] for r in ranks(run, group))
        assert rank0["debug_level"] == rank1["debug_level"] == "OFF"
        assert "Timed out waiting" in rank0["error"]
        assert len(rank1["sum"]) == 3 and rank1["sum"] != [2.0, 2.0, 2.0]  # silent and wrong
    for r in ranks(run, "env_reread"):
        assert r["value"]["debug_level"] == "DETAIL"
        error = r["value"]["error"]
        assert "Detected mismatch between collectives on ranks" in error
        assert "TensorShape=[4]" in error and "TensorShape=[3]" in error
    assert [r["value"]["sum"] for r in ranks(run, "fixed")] == [[2.0] * 4] * 2
    assert run.result["fresh_interpreter_level"] == "DETAIL"
    # The page's explanation: the variable is read once, when torch.distributed is imported.
    init = pathlib.Path(importlib.util.find_spec("torch").submodule_search_locations[0])
    assert "set_debug_level_from_env()" in (init / "distributed" / "__init__.py").read_text()


def test_unused_param(runs):
    for rank in runs["unused_param"].result["results"]:
        broken, fixed = rank["value"]["broken"], rank["value"]["fixed"]
        assert broken["steps"] == 1
        assert broken["error"].startswith(
            "RuntimeError: Expected to have finished reduction in the prior iteration"
        )
        assert f"did not receive grad for rank {rank['rank']}" in broken["error"]
        assert fixed["steps"] == 3 and fixed["error"] is None
        assert fixed["spare_head_grad_is_none"]


def test_uneven_inputs(runs):
    run = runs["uneven_inputs"]
    batches = {int(rank): count for rank, count in run.result["batches"].items()}
    rank0, rank1 = (r["value"] for r in ranks(run, "plain"))
    assert rank0["failed_in"] == f"step {batches[0]}"
    assert rank1["steps"] == batches[1] and "error" in rank1  # stuck at its next collective
    for r in ranks(run, "join"):
        assert r["value"] == {"steps": batches[r["rank"]], "replicas_identical": True}
    # The page: only rank 1 dies, of the size mismatch; rank 0 fails with a TypeError.
    own0, own1 = ranks(run, "join_loss_all_reduce")
    assert own0["status"] == "ok" and own0["value"]["failed_in"] == "the exit of Join"
    assert own0["value"]["error"].startswith("TypeError: _broadcast_coalesced()")
    assert own1["status"] == "died" and "killed by SIGABRT" in own1["error"]
    assert "Received data size doesn't match expected size" in own1["error"]
    assert any("Timed out" in r["value"].get("error", "") for r in ranks(run, "join_barrier"))


def test_set_epoch(runs):
    epochs = runs["set_epoch"].result["epochs"]
    assert all(epoch == epochs["forgotten"][0] for epoch in epochs["forgotten"])
    assert epochs["called"][0] == epochs["forgotten"][0]
    assert any(epoch != epochs["called"][0] for epoch in epochs["called"][1:])


def test_sum_loss(runs):
    result = runs["sum_loss"].result
    expected = [result["per_rank"], 1 / result["world_size"], 1.0]
    for (name, ratio), target in zip(result["ratios"].items(), expected, strict=True):
        for end in ("min", "max"):
            assert ratio[end] == pytest.approx(target, rel=1e-9), name
    assert result["per_rank"] != result["world_size"]  # so "b times", not "p times", is tested


def test_no_broadcast(runs):
    variants = runs["no_broadcast"].result["variants"]
    unsynced = variants["no broadcast"]
    assert unsynced["gap_before"] > 1e-3
    assert unsynced["gap_after"] == pytest.approx(unsynced["gap_before"], rel=1e-12, abs=0)
    assert unsynced["losses"][0] != unsynced["losses"][1]
    for name in ("dist.broadcast from rank 0 first", "DistributedDataParallel"):
        assert variants[name]["gap_before"] == variants[name]["gap_after"] == 0.0
        assert len(set(variants[name]["losses"])) == 1


def test_batchnorm(runs):
    for rank in runs["batchnorm"].result["ranks"]:
        assert (
            max(abs(a - b) for a, b in zip(rank["ddp_mean"], rank["full_mean"], strict=True)) > 1e-3
        )
        assert rank["ddp_output_error"] > 1e-3
        construct, forward = rank["refusals"].values()
        assert construct == "ValueError: SyncBatchNorm layers only work with GPU modules"
        assert forward.startswith("ValueError: SyncBatchNorm expected input tensor to be on GPU")
        assert rank["synced_mean"] == pytest.approx(rank["full_mean"], abs=1e-12)
        assert rank["synced_output_error"] < 1e-10


def test_eval_padding(runs):
    result = runs["eval_padding"].result
    truth = result["true_accuracy"]
    padded, dropped, strided = result["shardings"].values()
    assert padded["counted_twice"] and padded["accuracy"] > truth
    assert dropped["never_seen"] and dropped["accuracy"] > truth
    assert strided["seen"] == result["samples"] and not strided["never_seen"]
    assert not strided["counted_twice"] and strided["accuracy"] == truth


MONITORED_BARRIER_ON_CPU_GLOO = """
import datetime, tempfile
import torch.distributed as dist

store = tempfile.mkdtemp()
dist.init_process_group("gloo", init_method=f"file://{store}/s", rank=0, world_size=1)
group = dist.new_group(backend="cpu:gloo")
try:
    dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=10))
    print("accepted")
except ValueError as exc:
    print(f"ValueError: {exc}")
finally:
    dist.destroy_process_group()
"""


def test_monitored_barrier_takes_a_group_with_a_cpu_backend(tmp_path):
    """The page: any group with a CPU backend since 2.14; only plain gloo before (its note)."""
    from site_tests.tools.fence_plugin import expected_release

    proc = subprocess.run(
        [sys.executable, "-c", MONITORED_BARRIER_ON_CPU_GLOO],
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
        env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    outcome = proc.stdout.strip()
    if expected_release() >= (2, 14):
        assert outcome == "accepted", proc.stdout + proc.stderr
    else:
        assert outcome == "ValueError: monitored_barrier is only implemented for GLOO backend."


@pytest.mark.parametrize("name", [name for name in SCRIPTS if name not in SINGLE_PROCESS])
def test_every_error_is_printed_whole_on_one_line(runs, name):
    """Each rank's error appears verbatim in the report, on a line of its own rank's."""
    run = runs[name]
    groups = run.result.get("groups") or {"all": run.result["results"]}
    errors = [r["error"] for results in groups.values() for r in results if r["error"]]
    errors += [
        r["value"]["error"]
        for results in groups.values()
        for r in results
        if r["status"] == "ok" and isinstance(r["value"], dict) and r["value"].get("error")
    ]
    for error in errors:
        assert "\n" not in error
        assert any(error in line for line in run.result["printed"]), error


# ---------------------------------------------------------------------------------------------
# The plumbing: fast argument errors, the script's own deadline, killing a rank that hangs
# ---------------------------------------------------------------------------------------------
def test_bad_arguments_fail_before_torch_loads():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", str(FAILURES / "rank0_collective.py")]
        + ["--pg-timeout-s", "0"],
        capture_output=True,
        text=True,
        timeout=pace.limit(30),
    )
    assert proc.returncode == 2 and "--pg-timeout-s must be positive" in proc.stderr
    assert not re.search(r"\|\s+torch$", proc.stderr, re.MULTILINE), "torch was imported"


def python_with_harness(code, tmp_path, timeout=30):
    """Run `code` with code/failures importable, in a session and TMPDIR of its own."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=FAILURES,
        env=dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(FAILURES)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stdout, stderr = proc.communicate(timeout=pace.limit(timeout))
    leftovers = labrunner.kill_leftovers(proc.pid)
    return proc.returncode, stdout, stderr, leftovers, list(tmpdir.iterdir())


def test_overall_deadline_ends_the_script_with_one_line(tmp_path):
    code, stdout, stderr, _, _ = python_with_harness(
        """
        import time, harness
        with harness.overall_deadline(0.3):
            time.sleep(10)
        """,
        tmp_path,
    )
    assert code == 1
    assert stderr.strip() == "error: gave up: the script ran past its own 0.3 s deadline"


def test_a_rank_that_outlives_the_deadline_is_killed(tmp_path):
    code, stdout, stderr, leftovers, files = python_with_harness(
        """
        import json, time
        import torch, harness

        def stuck(rank, world_size):
            if rank == 1:
                time.sleep(60)  # not in a collective: no process-group timeout can end it
            return rank

        # At this machine's pace (the test's measurement, inherited): the group's start, which
        # must be over before rank 0 can answer, is bounded by the deadline less its margin.
        deadline_s = harness.pace.limit(4)
        started = time.monotonic()
        results = harness.run_groups({"stuck": stuck}, deadline_s=deadline_s)["stuck"]
        print(json.dumps([[r.status for r in results], time.monotonic() - started, deadline_s]))
        """,
        tmp_path,
    )
    assert code == 0, stderr
    statuses, seconds, deadline_s = json.loads(stdout)
    assert statuses == ["ok", "killed"] and seconds < deadline_s + pace.limit(1)
    assert leftovers == [] and files == []


# ---------------------------------------------------------------------------------------------
# The page and the build configuration agree with the scripts
# ---------------------------------------------------------------------------------------------
def test_every_script_is_declared_and_embedded():
    declared = gallery_runs()
    assert sorted(pathlib.Path(spec["script"]).stem for spec in declared.values()) == sorted(
        SCRIPTS
    )
    page = PAGE.read_text(encoding="utf-8")
    embedded = set(re.findall(r"^<!-- lab:([\w-]+):stdout -->$", page, re.MULTILINE))
    assert embedded == set(declared)
    markers = set(re.findall(r"^<!-- lab:([\w-]+):\w+ -->$", page, re.MULTILINE))
    assert markers <= set(declared), "a marker names a run that mkdocs.yml does not declare"


def test_the_not_run_rows_quote_what_the_installed_torch_knows():
    (torch_dir,) = importlib.util.find_spec("torch").submodule_search_locations  # no import
    suite = pathlib.Path(torch_dir) / "testing/_internal/distributed/distributed_test.py"
    fragment = "caught collective operation timeout"
    assert fragment in suite.read_text(encoding="utf-8")
    page = PAGE.read_text(encoding="utf-8")
    assert fragment in page and "this site did not run them" in page


def test_the_default_nccl_backend_words_its_timeout_as_the_page_quotes():
    """2.15's nccl2 watchdog message, found in the CUDA library (no GPU needed to read it)."""
    import mmap

    from site_tests.tools.fence_plugin import expected_release

    (torch_dir,) = importlib.util.find_spec("torch").submodule_search_locations
    library = pathlib.Path(torch_dir) / "lib" / "libtorch_cuda.so"
    if not library.is_file():
        pytest.skip(f"a CPU build of torch: no {library.name} to read")
    nccl2 = b"Watchdog caught collective operation timeout: NCCL operation timed out"
    with library.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        found = data.find(nccl2) >= 0
    assert found == (expected_release() >= (2, 15))
    assert nccl2.decode() in PAGE.read_text(encoding="utf-8")
