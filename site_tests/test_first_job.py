"""Chapter 1's first job: the single-device script, its DDP version under torchrun, the diff.

The DDP script runs once for the module, as the page tells a reader to start it (torchrun,
two CPU processes), with its checkpoint in a temporary folder.
"""

import re
import subprocess
import sys

import pytest
import torch

from site_tests.conftest import ROOT

SINGLE, DDP_SCRIPT = ROOT / "code" / "train_single.py", ROOT / "code" / "train_ddp.py"
TIMEOUT_S = 55


def torchrun(script, *args, nproc=2):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={nproc}", str(script), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    checkpoint = tmp_path_factory.mktemp("first-job") / "ddp.pt"
    done = torchrun(DDP_SCRIPT, "--checkpoint", str(checkpoint))
    assert done.returncode == 0, f"train_ddp.py failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout, checkpoint


def epoch_lines(stdout):
    pattern = r"epoch (\d+): mean loss ([\d.]+) over (\d+) examples \((\d+) on each of (\d+)"
    return [tuple(float(x) for x in found) for found in re.findall(pattern, stdout)]


def test_two_ranks_share_every_epoch_and_the_loss_falls(ddp_run):
    stdout, _ = ddp_run
    assert stdout.startswith("2 processes, backend gloo, on cpu\n"), stdout
    epochs = epoch_lines(stdout)
    assert [e[0] for e in epochs] == [0, 1, 2], stdout
    for _, _, everyone, each, world in epochs:
        assert (everyone, each, world) == (2048, 1024, 2), "each rank takes half the data"
    losses = [e[1] for e in epochs]
    assert losses[2] < losses[1] < losses[0], f"training does not converge: {losses}"


def test_rank0_saves_weights_every_rank_reloads(ddp_run):
    stdout, checkpoint = ddp_run
    assert f"saved {checkpoint}; 2 of 2 reloaded it" in stdout
    keys = torch.load(checkpoint, map_location="cpu").keys()
    assert not any(key.startswith("module.") for key in keys), "the DDP prefix leaked"


def test_only_rank0_prints(ddp_run):
    stdout, _ = ddp_run
    assert stdout.count("processes, backend") == 1 and len(epoch_lines(stdout)) == 3


def test_a_checkpoint_saved_with_the_wrapper_fails_to_reload(tmp_path):
    """The claim that `.module` matters: without it, the plain model refuses the file."""
    broken = tmp_path / "train_ddp.py"
    source = DDP_SCRIPT.read_text()
    assert source.count("model.module.state_dict()") == 1
    broken.write_text(source.replace("model.module.state_dict()", "model.state_dict()"))
    done = torchrun(broken, "--epochs", "1", "--checkpoint", str(tmp_path / "ckpt.pt"))
    assert done.returncode != 0
    assert 'Unexpected key(s) in state_dict: "module.' in done.stderr


def test_the_single_device_script_trains_and_reloads(tmp_path):
    checkpoint = tmp_path / "single.pt"
    command = [sys.executable, str(SINGLE), "--epochs", "2", "--checkpoint", str(checkpoint)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert re.findall(r"epoch (\d): mean loss [\d.]+ over 2048 examples", done.stdout) == [
        "0",
        "1",
    ]
    assert f"saved and reloaded {checkpoint}" in done.stdout


def test_the_scripts_differ_only_where_the_chapter_says(tmp_path):
    sys.path.insert(0, str(ROOT / "hooks"))
    try:
        import diffs
    finally:
        sys.path.remove(str(ROOT / "hooks"))
    text = diffs.unified(ROOT, "code/train_single.py", "code/train_ddp.py")
    added = [line[1:].strip() for line in text.splitlines() if line.startswith("+")]
    for change in (
        'dist.init_process_group("nccl", device_id=device)',
        "torch.cuda.set_device(device)",
        "sampler.set_epoch(epoch)",
        "torch.save(model.module.state_dict(), args.checkpoint)",
        "dist.destroy_process_group()",
    ):
        assert any(line.startswith(change) for line in added), f"no added {change!r}"
    assert not any(line.startswith("@@") for line in text.splitlines()), "one whole file"
    with pytest.raises(Exception, match="does not exist"):
        diffs.unified(ROOT, "code/train_single.py", "code/no_such_script.py")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_the_same_file_runs_on_gpus_with_nccl(tmp_path):
    count = torch.cuda.device_count()
    done = torchrun(DDP_SCRIPT, "--checkpoint", str(tmp_path / "gpu.pt"), nproc=count)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{count} processes, backend nccl, on cuda")
