"""code/clusters/elastic_train.py's checkpoints, without the two-node lab around it (no root).

A save forces the file to disk before renaming it (and the folder after), and prunes all but
the newest KEEP; a save cut short leaves the previous checkpoint the newest. The resume step
travels from rank 0 as a tensor, never through a pickling object collective. A two-rank
torchrun job resumed by a second start ends where one process training on the same global
batches does, to rounding. Chapter 5's lab (code/clusters/resume_lab.py) kills a rank mid-run and
ends bit-identical; the same crash, run once per checkpoint field with that field left out
of the save, ends elsewhere for every field but the CPU's disabled GradScaler: the teeth.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from site_tests.conftest import ROOT, pace

TRAINER = ROOT / "code" / "clusters" / "elastic_train.py"
TIMEOUT_S = 90
CPU = torch.device("cpu")
FIELDS = ("step", "epoch", "sampler_epoch", "model", "optimizer", "scheduler", "scaler", "rng")


@pytest.fixture
def trainer():
    spec = importlib.util.spec_from_file_location("elastic_under_test", TRAINER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def training_state(trainer, step=1):
    model = trainer.new_model()
    optimizer = trainer.new_optimizer(model.parameters())
    scheduler, scaler = trainer.new_scheduler(optimizer), trainer.new_scaler(CPU)
    sampler = torch.utils.data.DistributedSampler(trainer.data_set(), 1, 0)
    return trainer.training_state(step, 0, model, optimizer, scheduler, scaler, sampler)


def test_a_save_reaches_the_disk_before_its_name_and_old_ones_go(trainer, tmp_path, monkeypatch):
    events = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), replace(a, b))[1])
    for step in range(1, 5):
        trainer.save_atomically(tmp_path, step, training_state(trainer, step))
    # the file's bytes, then its name, then the folder that holds the name
    assert events == ["fsync", "replace", "fsync"] * 4
    kept = sorted(path.name for path in tmp_path.iterdir())
    assert kept == ["step-0003.pt", "step-0004.pt"] and trainer.KEEP == 2


def test_a_save_cut_short_leaves_the_previous_checkpoint_newest(
    trainer, tmp_path, one_rank_group, monkeypatch
):
    trainer.save_atomically(tmp_path, 1, training_state(trainer, 1))

    def die(*args):
        raise KeyboardInterrupt("the rank dies between writing and renaming")

    monkeypatch.setattr(os, "replace", die)
    with pytest.raises(KeyboardInterrupt):
        trainer.save_atomically(tmp_path, 2, training_state(trainer, 2))
    assert (tmp_path / "step-0002.tmp").is_file(), "the cut-short save wrote its temporary file"
    step = trainer.agreed_resume_step(tmp_path, 0, CPU)
    assert step == 1 and torch.load(trainer.checkpoint_path(tmp_path, step))["step"] == 1


def test_the_checkpoint_holds_every_piece_and_the_cpu_scaler_is_empty(trainer):
    state = training_state(trainer)
    assert tuple(state) == FIELDS
    assert state["scaler"] == {}, "float64 on the CPU: the GradScaler is disabled"
    assert state["rng"]["torch"].dtype == torch.uint8 and state["sampler_epoch"] == 0


def test_the_resume_step_travels_as_a_tensor(trainer, tmp_path, one_rank_group, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a pickling object collective")

    monkeypatch.setattr(dist, "broadcast_object_list", refuse)
    assert trainer.agreed_resume_step(tmp_path, 0, CPU) == 0, "no checkpoint: start at step 0"
    for step in (2, 5):
        torch.save({"step": step}, trainer.checkpoint_path(tmp_path, step))
    (tmp_path / "step-0006.tmp").write_bytes(b"half a file")  # a crash mid-save
    assert trainer.agreed_resume_step(tmp_path, 0, CPU) == 5


def torchrun(ckpt_dir, steps):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", str(TRAINER), f"--ckpt-dir={ckpt_dir}", f"--steps={steps}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=pace.limit(TIMEOUT_S))
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("@@ ")]


def test_a_second_start_resumes_and_ends_where_one_run_does(trainer, tmp_path):
    torchrun(tmp_path, steps=3)
    reports = [json.loads(line[3:]) for line in torchrun(tmp_path, steps=5)]
    starts = [r for r in reports if r["event"] == "start"]
    assert [r["resume_step"] for r in starts] == [3, 3], reports
    done = [r["params"] for r in reports if r["event"] == "done"]
    assert len(done) == 2 and done[0] == done[1], "the replicas differ"
    expected = trainer.params_hex(trainer.reference(5))  # the same batches in one process
    drift = max(
        abs(float.fromhex(a) - float.fromhex(b)) for a, b in zip(done[0], expected, strict=True)
    )
    assert drift < 1e-12, f"resumed training is {drift:.3g} from the one-process reference"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0004.pt", "step-0005.pt"]


# -------------------------------------------------------------------------------------------
# A rank killed mid-run: chapter 5's lab, and the same crash with each field left out
# -------------------------------------------------------------------------------------------
STEPS, CRASH_AT = 12, 7  # the crash lands in epoch 1, and the run crosses into epoch 2
CRASH = [f"--crash-at-step={CRASH_AT}", "--crash-rank=1"]


@pytest.fixture(scope="module")
def lab_run(lab_record):
    """The build's run of the lab (chapter 5 shows it), which keeps its defaults: STEPS steps,
    rank 1 crashing at CRASH_AT."""
    return lab_record("resume")["stdout"]


def test_the_lab_resumes_from_the_step_before_the_crash_bit_identical(lab_run):
    assert f"rank 1 dies at step {CRASH_AT}" in lab_run
    assert f"which resume from step {CRASH_AT - 1}\n" in lab_run, lab_run
    assert f"step {CRASH_AT} done again" in lab_run
    assert f"step-{STEPS - 1:04d}.pt step-{STEPS:04d}.pt\n" in lab_run, "pruned to KEEP"
    assert re.search(r"final parameters: bit-identical \((\d+) of \1 float64", lab_run), lab_run


# A torchrun entry point that is the trainer with one field left out of every save: its
# restore then keeps what a fresh start holds for that field.
FORGETFUL = """
import sys

sys.path.insert(0, {code!r})
import elastic_train as trainer

FORGOTTEN = sys.argv.pop(1)
real_state, real_restore = trainer.training_state, trainer.restore


def training_state(*args):
    state = real_state(*args)
    del state[FORGOTTEN]
    return state


def restore(state, *parts):
    return real_restore({{**real_state(0, 0, *parts), **state}}, *parts)


trainer.training_state, trainer.restore = training_state, restore
trainer.main()
"""


def crash_and_resume(script, ckpt_dir, *args):
    """A two-rank job in which rank 1 dies once; the final parameters, or None if it failed."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", "--max_restarts=1", str(script), *args]
    command += [f"--ckpt-dir={ckpt_dir}", f"--steps={STEPS}", *CRASH]
    env = dict(os.environ, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", OMP_NUM_THREADS="1")
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=pace.limit(TIMEOUT_S)
    )
    reports = [json.loads(line[3:]) for line in done.stdout.splitlines() if line[:3] == "@@ "]
    assert any(r["event"] == "crash" for r in reports), done.stdout + done.stderr
    finals = [r["params"] for r in reports if r["event"] == "done"]
    return finals[0] if done.returncode == 0 and len(finals) == 2 else None


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return torchrun(tmp_path_factory.mktemp("straight"), steps=STEPS)


@pytest.mark.teeth
@pytest.mark.parametrize("field", FIELDS)
def test_each_field_left_out_breaks_bit_identity(field, uninterrupted, tmp_path):
    reports = [json.loads(line[3:]) for line in uninterrupted]
    expected = next(r["params"] for r in reports if r["event"] == "done")
    script = tmp_path / "forgetful.py"
    script.write_text(FORGETFUL.format(code=str(TRAINER.parent)))
    resumed = crash_and_resume(script, tmp_path / "ckpt", field)
    if field == "scaler":  # disabled on the CPU: an empty state, nothing to lose
        assert resumed == expected, "the CPU's disabled GradScaler should change nothing"
    else:
        assert resumed != expected, f"a resume without {field!r} still ended bit-identical"
