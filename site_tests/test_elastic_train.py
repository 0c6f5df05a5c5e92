"""code/elastic_train.py's checkpoints, without the two-node lab around it (no root needed).

A save forces the file to disk before renaming it, and prunes all but the newest KEEP; the
resume step travels from rank 0 as a tensor, never through a pickling object collective. A
two-rank torchrun job resumed by a second start ends where one process training on the
full batch does, to rounding (the momentum came back with the weights).
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from site_tests.conftest import ROOT, pace

TRAINER = ROOT / "code" / "elastic_train.py"
TIMEOUT_S = 90


@pytest.fixture
def trainer():
    spec = importlib.util.spec_from_file_location("elastic_under_test", TRAINER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_save_reaches_the_disk_before_its_name_and_old_ones_go(trainer, tmp_path, monkeypatch):
    events = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), replace(a, b))[1])
    model = trainer.new_model()
    optimizer = trainer.new_optimizer(model.parameters())
    for step in range(1, 5):
        trainer.save_atomically(tmp_path, step, model, optimizer)
    assert events == ["fsync", "replace"] * 4
    kept = sorted(path.name for path in tmp_path.iterdir())
    assert kept == ["step-0003.pt", "step-0004.pt"] and trainer.KEEP == 2


def test_the_resume_step_travels_as_a_tensor(trainer, tmp_path, one_rank_group, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a pickling object collective")

    monkeypatch.setattr(dist, "broadcast_object_list", refuse)
    assert trainer.agreed_resume_step(tmp_path, 0) == 0, "no checkpoint: start at step 0"
    for step in (2, 5):
        torch.save({"step": step}, trainer.checkpoint_path(tmp_path, step))
    (tmp_path / "step-0006.tmp").write_bytes(b"half a file")  # a crash mid-save
    assert trainer.agreed_resume_step(tmp_path, 0) == 5


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
    expected = trainer.params_hex(trainer.reference(5))
    drift = max(
        abs(float.fromhex(a) - float.fromhex(b)) for a, b in zip(done[0], expected, strict=True)
    )
    assert drift < 1e-12, f"resumed training is {drift:.3g} from the one-process reference"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0004.pt", "step-0005.pt"]
