"""Chapter 1's first job: the single-device script, its DDP version under torchrun, the diff.

The DDP script runs once for the module, as the page tells a reader to start it (torchrun,
two CPU processes, OMP_NUM_THREADS unset), with $CHECKPOINT naming a file in a temporary
folder where an older checkpoint already lies, and a second name for that older file.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from site_tests.conftest import ROOT, labrunner, pace

SINGLE, DDP_SCRIPT = (
    ROOT / "code" / "first_job" / "train_single.py",
    ROOT / "code" / "first_job" / "train_ddp.py",
)
TIMEOUT_S = 55


def torchrun(script, *args, nproc=2, **env):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={nproc}", str(script), *args]
    environment = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | env
    timeout = pace.limit(TIMEOUT_S)
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=environment
    )


# Imported by every process of the module's run (a sitecustomize.py on PYTHONPATH, beside
# gloo_threads.py): at exit, before the interpreter's teardown, each process lists the gloo
# threads that would meet that teardown in one file.
EXIT_PROBE = """
import atexit, os
from gloo_threads import gloo_threads_after

def report_gloo_threads():
    line = " ".join(gloo_threads_after(float(os.environ["GLOO_GRACE_S"]))) or "none"
    with open(os.environ["GLOO_THREADS_AT_EXIT"], "a") as out:
        out.write(f"{os.getpid()}: {line}\\n")  # one write per line: ranks share the file

atexit.register(report_gloo_threads)
"""


@pytest.fixture(scope="module")
def exit_report(tmp_path_factory):
    """The file where the module's run lists each process's gloo threads at exit."""
    probe = tmp_path_factory.mktemp("exit-probe")
    (probe / "sitecustomize.py").write_text(EXIT_PROBE)
    return probe / "gloo-threads-at-exit.txt"


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, exit_report):
    folder = tmp_path_factory.mktemp("first-job")
    checkpoint = folder / "ddp.pt"
    checkpoint.write_bytes(b"an older checkpoint")
    os.link(checkpoint, folder / "reader.pt")  # a reader that opened the older file
    probes = [exit_report.parent, ROOT / "site_tests" / "tools"]
    paths = [*map(str, probes), os.environ.get("PYTHONPATH", "")]
    done = torchrun(
        DDP_SCRIPT,
        CHECKPOINT=str(checkpoint),
        PYTHONPATH=os.pathsep.join(filter(None, paths)),
        GLOO_THREADS_AT_EXIT=str(exit_report),
        GLOO_GRACE_S=str(pace.limit(2)),
    )
    assert done.returncode == 0, f"train_ddp.py failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout, checkpoint, done.stderr


def epoch_lines(stdout):
    pattern = r"epoch (\d+): mean loss ([\d.]+) over (\d+) examples \((\d+) on each of (\d+)"
    return [tuple(float(x) for x in found) for found in re.findall(pattern, stdout)]


def test_two_ranks_share_every_epoch_and_the_loss_falls(ddp_run):
    stdout, _, _ = ddp_run
    assert stdout.startswith("2 processes, backend gloo, on cpu\n"), stdout
    epochs = epoch_lines(stdout)
    assert [e[0] for e in epochs] == [0, 1, 2], stdout
    for _, _, everyone, each, world in epochs:
        assert (everyone, each, world) == (2048, 1024, 2), "each rank takes half the data"
    losses = [e[1] for e in epochs]
    assert losses[2] < losses[1] < losses[0], f"training does not converge: {losses}"


def test_rank0_saves_weights_every_rank_reloads(ddp_run):
    stdout, checkpoint, _ = ddp_run
    assert f"saved {checkpoint}; 2 of 2 reloaded it" in stdout, "$CHECKPOINT names the file"
    keys = torch.load(checkpoint, map_location="cpu").keys()
    assert not any(key.startswith("module.") for key in keys), "the DDP prefix leaked"


def test_the_checkpoint_is_replaced_whole_not_rewritten_in_place(ddp_run):
    _, checkpoint, _ = ddp_run
    reader = checkpoint.with_name("reader.pt")
    assert checkpoint.read_bytes() != b"an older checkpoint", "no new checkpoint was written"
    assert reader.read_bytes() == b"an older checkpoint", "the older file was written over"
    assert sorted(p.name for p in checkpoint.parent.iterdir()) == ["ddp.pt", "reader.pt"]


def test_only_rank0_prints(ddp_run):
    stdout, _, _ = ddp_run
    assert stdout.count("processes, backend") == 1 and len(epoch_lines(stdout)) == 3


def test_no_process_has_a_gloo_thread_left_at_exit(ddp_run, exit_report):
    """Chapter 4: torch._dynamo imported before the group lets destroy_process_group free it,
    so no gloo thread is left to race the interpreter's teardown (and abort the rank)."""
    lines = exit_report.read_text().splitlines()
    assert len(lines) == 3, lines  # the launcher and its two ranks
    assert not any("gloo" in line for line in lines), lines


def test_torchrun_prints_its_omp_num_threads_notice(ddp_run):
    """Chapter 1 shows the notice and says when torchrun prints it."""
    _, _, stderr = ddp_run
    notice = "Setting OMP_NUM_THREADS environment variable for each process to be 1"
    assert notice in stderr, stderr


def test_three_ranks_count_each_example_once_and_ddp_goes_first(tmp_path):
    """2,048 examples do not split over 3 ranks: none is counted twice in the epoch's loss.

    In every rank, a sitecustomize turns gc.collect() into nothing and checks, as
    destroy_process_group() starts, that no DDP object is left.
    """
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    checkpoint = str(tmp_path / "three.pt")
    done = torchrun(
        DDP_SCRIPT, "--epochs", "1", "--checkpoint", checkpoint, nproc=3, PYTHONPATH=str(tmp_path)
    )
    assert done.returncode == 0, f"train_ddp.py failed:\n{done.stdout}\n{done.stderr}"
    ((_, _, everyone, each, world),) = epoch_lines(done.stdout)
    assert (everyone, each, world) == (2046, 682, 3), f"padding counted: {done.stdout}"
    assert done.stdout.count("no DDP object left") == 3, done.stdout + done.stderr
    assert "gc.collect" not in DDP_SCRIPT.read_text(), "the DDP model is dropped, not collected"


SITECUSTOMIZE = textwrap.dedent(
    """\
    import gc
    import os

    if "RANK" in os.environ:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        gc.collect = lambda *args: 0
        destroy = dist.destroy_process_group

        def checked(*args, **kwargs):
            left = [o for o in gc.get_objects() if isinstance(o, DistributedDataParallel)]
            if not left:
                print("no DDP object left", flush=True)
            destroy(*args, **kwargs)

        dist.destroy_process_group = checked
    """
)


def test_a_checkpoint_saved_with_the_wrapper_fails_to_reload(tmp_path):
    """The claim that `.module` matters: without it, the plain model refuses the file."""
    broken = tmp_path / "train_ddp.py"
    source = DDP_SCRIPT.read_text()
    assert source.count("model.module.state_dict()") == 1
    broken.write_text(source.replace("model.module.state_dict()", "model.state_dict()"))
    done = torchrun(broken, "--epochs", "1", "--checkpoint", str(tmp_path / "ckpt.pt"))
    assert done.returncode != 0
    assert 'Unexpected key(s) in state_dict: "module.' in done.stderr


def test_the_single_device_script_trains_and_reloads(tmp_path, ddp_run):
    checkpoint = tmp_path / "single.pt"
    command = [sys.executable, str(SINGLE), "--epochs", "2", "--checkpoint", str(checkpoint)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=pace.limit(TIMEOUT_S))
    assert done.returncode == 0, done.stderr
    assert re.findall(r"epoch (\d): mean loss [\d.]+ over 2048 examples", done.stdout) == [
        "0",
        "1",
    ]
    assert f"saved and reloaded {checkpoint}" in done.stdout
    # Chapter 1: its first epoch ends lower than the DDP job's, which takes half the steps.
    single = float(re.search(r"epoch 0: mean loss ([\d.]+)", done.stdout).group(1))
    assert single < epoch_lines(ddp_run[0])[0][1], (done.stdout, ddp_run[0])


def test_the_scripts_differ_only_where_the_chapter_says(tmp_path):
    sys.path.insert(0, str(ROOT / "hooks"))
    try:
        import diffs
    finally:
        sys.path.remove(str(ROOT / "hooks"))
    text = diffs.unified(ROOT, "code/first_job/train_single.py", "code/first_job/train_ddp.py")
    added = [line[1:].strip() for line in text.splitlines() if line.startswith("+")]
    for change in (
        'dist.init_process_group("nccl", device_id=device)',
        "torch.cuda.set_device(device)",
        "sampler.set_epoch(epoch)",
        "sampler = DistributedSampler(dataset, drop_last=True)",
        "save_atomically(model.module.state_dict(), args.checkpoint)",
        "os.fsync(file.fileno())",
        "os.replace(temporary, path)",
        "del model",
        "dist.destroy_process_group()",
    ):
        assert any(line.startswith(change) for line in added), f"no added {change!r}"
    assert not any(line.startswith("@@") for line in text.splitlines()), "one whole file"
    with pytest.raises(Exception, match="does not exist"):
        diffs.unified(ROOT, "code/first_job/train_single.py", "code/no_such_script.py")


def test_the_build_runs_a_plain_script_as_a_reader_does(tmp_path, monkeypatch):
    """The single-device script's run (plain: true): `python SCRIPT`, no --json, its record
    holding stderr too, and what it saves in its current folder gone with the run."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "provenance.py").write_text((ROOT / "code" / "provenance.py").read_text())
    script = "import sys\nprint('out')\nprint('err', file=sys.stderr)\nopen('first_job.pt', 'w')\n"
    (tmp_path / "run.py").write_text(script)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    plain = labrunner.LabRun("demo", {"script": "run.py", "plain": "true"}, tmp_path)
    assert "--json" not in plain.argv(tmp_path / "x.json") and plain.command[0] == "python"
    json_run = labrunner.LabRun("demo", {"script": "run.py"}, tmp_path)
    assert plain.cache_key() != json_run.cache_key()
    record = labrunner.execute(plain)
    assert sorted(record["stdout"].split()) == ["err", "out"] and "env" in record["result"]
    assert not (tmp_path / "first_job.pt").exists(), "the run wrote into the repository"
    assert record["left_files"] == ["first_job.pt"]  # its current folder was its TMPDIR
    torchrun_run = labrunner.LabRun("demo", {"script": "run.py", "torchrun": "2"}, tmp_path)
    assert "OMP_NUM_THREADS" not in labrunner.lab_environment(torchrun_run, "tmp")
    assert labrunner.lab_environment(plain, "tmp")["OMP_NUM_THREADS"] == "4"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_the_same_file_runs_on_gpus_with_nccl(tmp_path):
    count = torch.cuda.device_count()
    done = torchrun(DDP_SCRIPT, "--checkpoint", str(tmp_path / "gpu.pt"), nproc=count)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{count} processes, backend nccl, on cuda")
