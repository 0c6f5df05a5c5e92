"""Kill a rank mid-run and watch the job resume, bit for bit: chapter 5's resume lab.

    python code/clusters/resume_lab.py                     # 12 steps, rank 1 dies at step 7
    python code/clusters/resume_lab.py --steps 8 --crash-at-step 6

It runs code/clusters/elastic_train.py twice under torchrun on this machine, two ranks each: once
straight through, and once with --max_restarts=1 while rank 1 dies at a step (exit status
1 at once, as a killed process: no handler runs). The agent restarts both workers, which
resume from the newest checkpoint; the lab prints what the ranks reported and compares the
two runs' final parameters, every float64 bit of them. Each run gets a fresh checkpoint
folder in a temporary directory, removed at the end.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

# code/, one folder up, holds what every family of labs shares: pace, provenance, lab_cli,
# the launcher. Put it on the path, so this script runs from any folder.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import pace  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
TRAINER = HERE / "elastic_train.py"
RUN_LIMIT_S = 60  # per torchrun job, on a machine where `import torch` takes 2 s


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per run")
    parser.add_argument("--crash-at-step", type=int, default=7, help="rank 1 dies here")
    args = parser.parse_args()
    if not 2 <= args.crash_at_step <= args.steps:
        parser.error(f"--crash-at-step must be between 2 and --steps ({args.steps})")
    return args


def torchrun(ckpt_dir, steps, *extra, restarts=0):
    """One two-rank job; its `@@` reports, in the order they were printed."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", f"--max_restarts={restarts}", str(TRAINER)]
    command += [f"--ckpt-dir={ckpt_dir}", f"--steps={steps}", *extra]
    # The restarted workers would find the first round's addresses in a shared store and
    # fail to connect (pytorch#135712): each round gets a store of its own.
    env = dict(os.environ, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", OMP_NUM_THREADS="1")
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=pace.limit(RUN_LIMIT_S)
    )
    if done.returncode != 0:
        sys.exit(f"torchrun exited with status {done.returncode}:\n{done.stderr[-3000:]}")
    return [json.loads(line[3:]) for line in done.stdout.splitlines() if line.startswith("@@ ")]


def final_params(reports):
    finals = [r["params"] for r in reports if r["event"] == "done"]
    assert len(finals) == 2 and finals[0] == finals[1], "the two ranks ended apart"
    return finals[0]


def show_interrupted(reports, ckpt_dir):
    crash = next(r for r in reports if r["event"] == "crash")
    print(f"  rank {crash['rank']} dies at step {crash['step']} (exit status 1, no cleanup)")
    again = [r for r in reports if r["event"] == "start" and r["restart"] > 0]
    steps = sorted({r["resume_step"] for r in again})
    print(f"  torchrun restarts both workers, which resume from step {', '.join(map(str, steps))}")
    redone = next(r for r in reports if r["event"] == "step" and r["restart"] > 0)
    print(f"  step {redone['step']} done again {redone['t'] - crash['t']:.1f} s after the crash")
    left = sorted(path.name for path in ckpt_dir.iterdir())
    print(f"  checkpoints left in the folder: {' '.join(left)}")


def main():
    args = parse_args()
    print(f"import torch takes {pace.import_seconds():.1f} s on this machine")
    with tempfile.TemporaryDirectory(prefix="resume-lab-") as scratch:
        straight_dir, crashed_dir = pathlib.Path(scratch, "a"), pathlib.Path(scratch, "b")
        print(f"uninterrupted: torchrun --nproc_per_node=2 elastic_train.py --steps={args.steps}")
        straight = final_params(torchrun(straight_dir, args.steps))
        print(
            f"interrupted:   torchrun --nproc_per_node=2 --max_restarts=1 elastic_train.py\n"
            f"                 --steps={args.steps} --crash-at-step={args.crash_at_step} "
            "--crash-rank=1"
        )
        crash = [f"--crash-at-step={args.crash_at_step}", "--crash-rank=1"]
        reports = torchrun(crashed_dir, args.steps, *crash, restarts=1)
        show_interrupted(reports, crashed_dir)
        resumed = final_params(reports)
    same = sum(a == b for a, b in zip(straight, resumed, strict=True))
    verdict = "bit-identical" if same == len(straight) else "DIFFERENT"
    print(f"final parameters: {verdict} ({same} of {len(straight)} float64 values equal)")
    return 0 if verdict == "bit-identical" else 1


if __name__ == "__main__":
    sys.exit(main())
