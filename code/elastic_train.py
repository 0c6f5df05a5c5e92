"""An elastic-ready DDP training script: torchrun may stop and restart it at any step.

    torchrun --standalone --nproc_per_node=2 code/elastic_train.py --ckpt-dir=/tmp/ckpt
    # two nodes in network namespaces: sudo python code/26_two_nodes.py

A restart runs this file from its first line, so it is elastic-ready in three ways:
1. at start it resumes from its newest checkpoint (model, optimizer, step), before DDP
   wraps the model, so that DDP's first broadcast carries the restored weights;
2. it saves atomically every step (a temporary file, forced to disk, then renamed) and
   deletes all but the newest KEEP checkpoints;
3. it derives everything that depends on the world size at start, from WORLD_SIZE.

It trains a float64 linear model on a fixed synthetic data set with DistributedSampler
and DDP on gloo. Every step covers the whole data set once, so the averaged gradient is
the full-batch gradient, and `reference` reproduces the training in one process.
Each rank prints one JSON line per event, prefixed with `@@`, for the launcher to read.
"""

import argparse
import datetime
import gc
import json
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler, TensorDataset

# -------------------------------------------------------------------------------------
# Settings
# -------------------------------------------------------------------------------------
SAMPLES, FEATURES, SEED, LR, MOMENTUM = 64, 8, 26, 0.05, 0.9
KEEP = 2  # checkpoints left on disk after each save; older ones are deleted


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt-dir", required=True, help="shared checkpoint folder")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps in all")
    parser.add_argument("--timeout", type=float, default=20, help="seconds to wait")
    parser.add_argument(
        "--crash-at-step",
        type=int,
        default=None,
        help="fault injection: --crash-rank dies at this step in a fresh start",
    )
    parser.add_argument("--crash-rank", type=int, default=3, help="rank that crashes")
    return parser.parse_args()


# -------------------------------------------------------------------------------------
# Helpers
# -------------------------------------------------------------------------------------
def report(event, **fields):
    """One machine-readable line; the wall clock lets the launcher line up the nodes."""
    line = {"event": event, "rank": int(os.environ["RANK"]), "t": time.time()}
    # The ranks of a node share one log. print() writes the text and its newline in two
    # calls, so another rank's line can land between them; one write keeps lines whole.
    sys.stdout.write("@@ " + json.dumps({**line, **fields}) + "\n")
    sys.stdout.flush()


def data_set():
    """The same 64 examples on every rank and in every restart: a fixed seed."""
    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn(SAMPLES, FEATURES, generator=gen, dtype=torch.float64)
    true_w = torch.randn(FEATURES, 1, generator=gen, dtype=torch.float64)
    return TensorDataset(x, x @ true_w + 0.1)


def new_model():
    torch.manual_seed(SEED)  # the same initial weights everywhere
    return torch.nn.Linear(FEATURES, 1).double()


def new_optimizer(params):
    # Momentum makes the optimizer's state matter: a resume without it would drift.
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def checkpoint_path(ckpt_dir, step):
    return ckpt_dir / f"step-{step:04d}.pt"


def checkpoints(ckpt_dir):
    """The complete checkpoints, oldest first; a crash's `.tmp` never counts."""
    return sorted(ckpt_dir.glob("step-*.pt"))


def agreed_resume_step(ckpt_dir, rank):
    """The step of rank 0's newest checkpoint (0: none), the same on every rank.

    Rank 0 alone looks, so that all agree even if a save lands meanwhile; the step travels
    as a tensor, with no pickling, and each rank finds the file by its name.
    """
    found = checkpoints(ckpt_dir) if rank == 0 else []
    step = torch.tensor([int(found[-1].stem.removeprefix("step-")) if found else 0])
    dist.broadcast(step, src=0)
    return int(step.item())


def save_atomically(ckpt_dir, step, model, optimizer):
    """Write a temporary file, force it to disk, then rename it: a crash never leaves a
    half file, and a reader on another node sees no file or all of it. Then prune."""
    final = checkpoint_path(ckpt_dir, step)
    tmp = final.with_suffix(".tmp")
    state = {"step": step, "model": model.state_dict(), "opt": optimizer.state_dict()}
    with open(tmp, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())  # the bytes are on disk before the name points at them
    os.replace(tmp, final)  # atomic on POSIX
    for old in checkpoints(ckpt_dir)[:-KEEP]:
        old.unlink()


def params_hex(model):
    """Every parameter as float.hex(): equal strings mean bit-identical parameters."""
    values = [v for p in model.parameters() for v in p.detach().flatten().tolist()]
    return [v.hex() for v in values]


# -------------------------------------------------------------------------------------
# Training
# -------------------------------------------------------------------------------------
def train(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    ckpt_dir = pathlib.Path(args.ckpt_dir)

    # What depends on the world size is derived now, from this start's WORLD_SIZE.
    assert SAMPLES % world == 0, f"{SAMPLES} examples do not split over {world} ranks"
    per_rank = SAMPLES // world
    dataset = data_set()
    sampler = DistributedSampler(dataset, world, rank, shuffle=True, seed=SEED)
    model = new_model()
    optimizer = new_optimizer(model.parameters())

    # Resume before DDP wraps the model: its constructor then broadcasts the restored weights.
    start = agreed_resume_step(ckpt_dir, rank)
    if start:
        state = torch.load(checkpoint_path(ckpt_dir, start), weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["opt"])  # momentum: every rank needs its own copy
    model = DDP(model)
    report(
        "start",
        group_rank=int(os.environ["GROUP_RANK"]),
        local_rank=int(os.environ["LOCAL_RANK"]),
        world=world,
        restart=restart,
        resume_step=start,
    )

    for step in range(start + 1, args.steps + 1):
        # Only a fresh start crashes: the restarted attempt resumes past this step.
        if step == args.crash_at_step and rank == args.crash_rank and start == 0:
            report("crash", step=step)
            os._exit(1)  # a hard crash: no exception handler, no `finally`
        sampler.set_epoch(step)  # a new shuffle each step, the same after a restart
        x, y = dataset[list(sampler)]
        assert len(x) == per_rank
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)  # DDP averages the ranks
        loss.backward()
        optimizer.step()
        if rank == 0:
            save_atomically(ckpt_dir, step, model.module, optimizer)
        report("step", step=step, restart=restart)
    report("done", params=params_hex(model.module))


def reference(steps):
    """The same training in one process on the full batch: what the ranks must match."""
    x, y = data_set().tensors
    model = new_model()
    optimizer = new_optimizer(model.parameters())
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model


def main():
    args = parse_args()
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        sys.exit("elastic_train.py: start it with torchrun (no TORCHELASTIC_RUN_ID)")
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", timeout=timeout)
    try:
        train(args)
    finally:
        # Something train() built still holds the group in a reference cycle (not the DDP
        # model, which is freed on return). Without this collection, half of our runs on
        # torch 2.14.1 aborted at exit: "terminate called without an active exception".
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
