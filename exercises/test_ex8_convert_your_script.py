"""Exercise 8's tests: the converted script survives a killed rank, bit for bit.

torchrun starts the script on two ranks three times, through faults.py, which reports each
rank's DDP and optimizer steps and injects one fault:
- straight through: every rank wraps its model in DDP and takes its half of each batch, and
  the ranks end equal, where one process training on the whole batches ends (to rounding);
- with --max_restarts=1, rank 1 killed right after a step of the second epoch: the ranks come
  back, resume from a checkpoint (fewer steps than from scratch), and end on the uninterrupted
  run's parameters, every bit;
- the same, with rank 0 killed halfway through writing a checkpoint.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile

import pytest
import torch
from ranks import load_exercise

exercise = load_exercise("ex8_convert_your_script")

HERE = pathlib.Path(__file__).resolve().parent
WORLD_SIZE, STEPS = 2, 10
KILL_AFTER_STEP = 6  # in the second epoch: its shuffle and the dropout masks both matter
TORN_SAVE = 6  # rank 0 dies writing its sixth checkpoint
JOB_TIMEOUT_S = 120  # one job takes seconds; a rank that waits for a dead peer, longer


def torchrun(fault=None):
    """One two-rank job through faults.py; (exit status, the `@@` reports, all output)."""
    with tempfile.TemporaryDirectory(prefix="exercise-8-") as scratch:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [f"--nproc_per_node={WORLD_SIZE}", f"--max_restarts={int(bool(fault))}"]
        command += [str(HERE / "faults.py"), exercise.__file__]
        command += [f"--ckpt-dir={scratch}/ckpt", f"--steps={STEPS}"]
        # A restart's workers must not read the first round's addresses (pytorch#135712).
        env = dict(os.environ, FAULT=fault or "", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
        env.update(OMP_NUM_THREADS="1", TMPDIR=scratch)
        job = subprocess.Popen(
            command,
            cwd=scratch,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = job.communicate(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            output, _ = job.communicate()
            pytest.fail(f"the job was still running after {JOB_TIMEOUT_S} s:\n{output[-3000:]}")
    return job.returncode, reports_in(output), output


def reports_in(output):
    """The `@@` reports, wherever they landed: a rank's own print() writes its text and its
    newline in two calls, so another rank's report can start in the middle of a line."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(piece)[0] for piece in output.split("@@ ")[1:]]


def finished(job, what):
    returncode, reports, output = job
    assert returncode == 0, f"{what}: torchrun exited with status {returncode}:\n{output[-3000:]}"
    finals = {r["rank"]: r["params"] for r in reports if r["event"] == "final"}
    assert sorted(finals) == list(range(WORLD_SIZE)), (
        f"{what}: call report_final(model) on every rank at the end (it reported on "
        f"{sorted(finals)})"
    )
    return reports, finals


def one_process_reference():
    """The starter's training, in this process: the whole BATCH in every step."""
    torch.manual_seed(exercise.SEED)
    dataset = exercise.make_dataset()
    sampler = torch.utils.data.DistributedSampler(dataset, 1, 0, seed=exercise.SEED)
    model = exercise.DropoutLinear()
    optimizer = torch.optim.SGD(model.parameters(), lr=exercise.LR, momentum=exercise.MOMENTUM)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    for step in range(STEPS):
        epoch, k = divmod(step, exercise.STEPS_PER_EPOCH)
        sampler.set_epoch(epoch)
        x, y = dataset[list(sampler)[k * exercise.BATCH : (k + 1) * exercise.BATCH]]
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()
    return [v for p in model.parameters() for v in p.detach().flatten().tolist()]


@pytest.fixture(scope="module")
def straight():
    return torchrun()


@pytest.fixture(scope="module")
def killed():
    return torchrun(f"kill:1:{KILL_AFTER_STEP}")


@pytest.fixture(scope="module")
def torn():
    return torchrun(f"torn:0:{TORN_SAVE}")


def test_every_rank_trains_with_ddp_on_its_share_of_each_batch(straight):
    reports, _ = finished(straight, "the uninterrupted run")
    for rank in range(WORLD_SIZE):
        mine = [r for r in reports if r["rank"] == rank]
        assert any(r["event"] == "ddp" for r in mine), (
            f"rank {rank} never wrapped its model in DistributedDataParallel"
        )
        rows = [r["rows"] for r in mine if r["event"] == "step"]
        share = exercise.BATCH // WORLD_SIZE
        assert len(rows) == STEPS and set(rows) == {share}, (
            f"rank {rank} took {rows} examples in its {len(rows)} steps through DDP; "
            f"each of {STEPS} steps should give each rank {share} of the {exercise.BATCH}"
        )


def test_the_ranks_end_equal_and_where_one_process_does(straight):
    _, finals = finished(straight, "the uninterrupted run")
    assert finals[0] == finals[1], "the ranks ended with different parameters"
    ours = [float.fromhex(v) for v in finals[0]]
    drift = max(abs(a - b) for a, b in zip(ours, one_process_reference(), strict=True))
    assert drift < 1e-12, (
        f"the ranks ended {drift:.3g} from one process training on the same whole batches: "
        "is every rank seeded alike, and does each take its part of the same batch?"
    )


def resumed_bit_identical(job, straight, what):
    reports, finals = finished(job, what)
    again = [r for r in reports if r["event"] == "step" and r["restart"] > 0]
    for rank in range(WORLD_SIZE):
        steps = sum(r["rank"] == rank for r in again)
        assert 0 < steps < STEPS, (
            f"{what}: after the restart rank {rank} trained {steps} steps of {STEPS}; "
            "it should resume from the newest checkpoint"
        )
    _, expected = finished(straight, "the uninterrupted run")
    for rank in range(WORLD_SIZE):
        differ = sum(a != b for a, b in zip(finals[rank], expected[0], strict=True))
        assert differ == 0, (
            f"{what}: rank {rank} ended with {differ} of {len(expected[0])} parameters not "
            "bit-identical to the uninterrupted run: what did the checkpoint not bring back?"
        )


def test_a_killed_rank_resumes_to_the_same_bits(killed, straight):
    resumed_bit_identical(killed, straight, f"rank 1 killed after step {KILL_AFTER_STEP}")


def test_a_rank_killed_mid_save_resumes_to_the_same_bits(torn, straight):
    _, reports, output = torn
    assert any(r["event"] == "step" and r["restart"] > 0 for r in reports) or torn[0] != 0, (
        f"rank 0 made fewer than {TORN_SAVE} torch.save calls: save a checkpoint every step"
    )
    what = f"rank 0 killed halfway through checkpoint {TORN_SAVE}"
    resumed_bit_identical(torn, straight, what)
