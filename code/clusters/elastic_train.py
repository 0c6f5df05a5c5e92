"""An elastic-ready DDP training script: torchrun may stop and restart it at any step.

    torchrun --standalone --nproc_per_node=2 --max_restarts=1 \
        code/clusters/elastic_train.py --ckpt-dir=/shared/ckpt
    CKPT_DIR=/shared/ckpt torchrun --standalone --nproc_per_node=2 code/clusters/elastic_train.py
    # two nodes in network namespaces: sudo python code/clusters/two_nodes.py
    # a Slurm job on GPU nodes: code/clusters/jobs/train-torchrun-gpu.sbatch

A restart runs this file from its first line, so it is elastic-ready in three ways:
1. at start it resumes from its newest complete checkpoint, before DDP wraps the model,
   so that DDP's first broadcast carries the restored weights. The checkpoint holds all
   that the next step depends on: the model, the optimizer (momentum), the LR scheduler,
   the GradScaler, the epoch and the step, the sampler's epoch (its shuffle) and torch's
   random generators (the dropout masks);
2. rank 0 saves atomically every step (a temporary file forced to disk, renamed, then the
   folder forced to disk) into a folder every node sees, and deletes all but the newest
   KEEP checkpoints;
3. it derives everything that depends on the world size at start, from WORLD_SIZE.

It trains a float64 linear model with feature dropout on a fixed synthetic data set, in
mini-batches that DistributedSampler shuffles anew each epoch: with DDP on NCCL, one GPU
per process, where CUDA finds a GPU, else on gloo and the CPU (as train_ddp.py). Step k
of an epoch trains on the same GLOBAL_BATCH examples whatever the world size, so
`reference` reproduces the training in one process (to rounding), and a resumed run
matches an uninterrupted one bit for bit. Each rank prints one JSON line per event,
prefixed with `@@`, for the launcher to read.
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

# torch._dynamo comes before the process group: first imported after it (as the
# first DDP or torch.optim use does), it keeps the group alive past
# destroy_process_group, and the exit can abort (chapter 4).
import torch._dynamo  # noqa: F401
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler, TensorDataset

# -------------------------------------------------------------------------------------
# Settings
# -------------------------------------------------------------------------------------
SAMPLES, FEATURES, SEED = 64, 8, 26
GLOBAL_BATCH = 16  # examples per step, summed over the ranks
STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH
LR, MOMENTUM, LR_HALVES_EVERY = 0.05, 0.9, 5  # steps between halvings of the LR
DROP = 0.25  # the share of input features dropout zeroes in each step
KEEP = 2  # checkpoints left on disk after each save; older ones are deleted


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ckpt-dir",
        default=os.environ.get("CKPT_DIR"),
        help="checkpoint folder on a file system every node mounts (default: $CKPT_DIR)",
    )
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps in all")
    parser.add_argument("--timeout", type=float, default=20, help="seconds to wait")
    parser.add_argument(
        "--crash-at-step",
        type=int,
        default=None,
        help="fault injection: --crash-rank dies at this step in a fresh start",
    )
    parser.add_argument("--crash-rank", type=int, default=3, help="rank that crashes")
    args = parser.parse_args()
    if not args.ckpt_dir:
        parser.error("name a shared checkpoint folder: --ckpt-dir or $CKPT_DIR")
    return args


# -------------------------------------------------------------------------------------
# Data, model, and what trains it
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


class DropoutLinear(torch.nn.Module):
    """A linear model whose inputs lose a random quarter of their features each step.

    How this trainer seeds its ranks, and why: alike. One mask per step covers the whole
    global batch (it drops features, not examples), as in the one-process reference, so
    every rank must draw the same mask: every rank seeds torch's CPU generator with SEED
    and draws the mask there, on a GPU too. The generator's state is then part of the
    training's state, the same on every rank, and rank 0's copy in the checkpoint stands
    for all; a resume that did not restore it would draw other masks. Dropout that drops
    each example's units on its own wants the opposite, a seed per rank (chapter 4), and
    each rank's generator state in the checkpoint.
    """

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(FEATURES, 1).double()

    def forward(self, x):
        keep = (torch.rand(1, FEATURES, dtype=x.dtype) >= DROP).to(x.device, x.dtype)
        return self.linear(x * keep / (1 - DROP))


def new_model():
    torch.manual_seed(SEED)  # the same initial weights, and masks, everywhere
    return DropoutLinear()


def new_optimizer(params):
    # Momentum makes the optimizer's state matter: a resume without it would drift.
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def new_scheduler(optimizer):
    return torch.optim.lr_scheduler.StepLR(optimizer, LR_HALVES_EVERY, gamma=0.5)


def new_scaler(device):
    # float64 needs no loss scaling: the scaler is disabled and its state is {}. With
    # float16 autocast on GPUs it is enabled, and its scale must survive a restart.
    return torch.amp.GradScaler(device.type, enabled=False)


def epoch_batches(sampler, per_rank):
    """This rank's batches of the sampler's current epoch, in order.

    DistributedSampler hands rank r every world-th index of one shuffled order, so batch k
    of every rank together is positions k*GLOBAL_BATCH .. (k+1)*GLOBAL_BATCH-1 of that
    order: the same examples in step k whatever the world size.
    """
    order = list(sampler)
    return [order[i : i + per_rank] for i in range(0, len(order), per_rank)]


# -------------------------------------------------------------------------------------
# Checkpoints
# -------------------------------------------------------------------------------------
def checkpoint_path(ckpt_dir, step):
    return ckpt_dir / f"step-{step:04d}.pt"


def checkpoints(ckpt_dir):
    """The complete checkpoints, oldest first; a crash's `.tmp` never counts."""
    return sorted(ckpt_dir.glob("step-*.pt"))


def wait_for_file(path, seconds):
    """Until `path` exists (a checkpoint's name appears only once it is complete)."""
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def agreed_resume_step(ckpt_dir, rank, device):
    """The step of rank 0's newest checkpoint (0: none), the same on every rank.

    Rank 0 alone looks, so that all agree even if a save lands meanwhile; the step travels
    as a tensor on the backend's device (NCCL: the GPU), with no pickling, and each rank
    finds the file by its name.
    """
    found = checkpoints(ckpt_dir) if rank == 0 else []
    newest = int(found[-1].stem.removeprefix("step-")) if found else 0
    step = torch.tensor([newest], device=device)
    dist.broadcast(step, src=0)
    return int(step.item())


# --8<-- [start:state]
def training_state(step, epoch, model, optimizer, scheduler, scaler, sampler):
    """Everything the next step depends on. The ranks draw the same random numbers
    (DropoutLinear says why), so rank 0's generators stand for every rank's."""
    return {
        "step": step,
        "epoch": epoch,
        "sampler_epoch": sampler.epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "rng": {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        },
    }


def restore(state, model, optimizer, scheduler, scaler, sampler):
    """Put every piece back; return the step and the epoch to go on from."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])  # momentum: each rank needs its copy
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
    sampler.set_epoch(state["sampler_epoch"])  # else the epoch replays epoch 0's shuffle
    torch.set_rng_state(state["rng"]["torch"])
    if state["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return state["step"], state["epoch"]


# --8<-- [end:state]


# --8<-- [start:save]
def save_atomically(ckpt_dir, step, state):
    """Write a temporary file, force it to disk, then rename it: a crash never leaves a
    half file under a checkpoint's name, and a reader on another node sees no file or
    all of it. Then force the folder (the rename) to disk too, and prune."""
    final = checkpoint_path(ckpt_dir, step)
    tmp = final.with_suffix(".tmp")
    with open(tmp, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())  # the bytes are on disk before the name points at them
    os.replace(tmp, final)  # atomic on POSIX
    folder = os.open(ckpt_dir, os.O_RDONLY)
    try:
        os.fsync(folder)  # the new name survives a power cut too
    finally:
        os.close(folder)
    for old in checkpoints(ckpt_dir)[:-KEEP]:
        old.unlink()


# --8<-- [end:save]


def params_hex(model):
    """Every parameter as float.hex(): equal strings mean bit-identical parameters."""
    values = [v for p in model.parameters() for v in p.detach().flatten().tolist()]
    return [v.hex() for v in values]


# -------------------------------------------------------------------------------------
# Training
# -------------------------------------------------------------------------------------
def train_step(model, optimizer, scheduler, scaler, x, y):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)  # DDP averages the ranks' gradients
    scaler.scale(loss).backward()  # with the scaler disabled: loss.backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()


def train(args, device):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    ckpt_dir = pathlib.Path(args.ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    # What depends on the world size is derived now, from this start's WORLD_SIZE.
    assert GLOBAL_BATCH % world == 0, f"{GLOBAL_BATCH} examples do not split over {world}"
    per_rank = GLOBAL_BATCH // world
    dataset = data_set()
    sampler = DistributedSampler(dataset, world, rank, shuffle=True, seed=SEED)
    model = new_model().to(device)
    optimizer = new_optimizer(model.parameters())
    scheduler, scaler = new_scheduler(optimizer), new_scaler(device)

    # --8<-- [start:resume]
    # Resume before DDP wraps the model: its constructor then broadcasts the restored
    # weights, and every rank has restored the same state from the same file.
    step, epoch = agreed_resume_step(ckpt_dir, rank, device), 0
    if step:
        path = checkpoint_path(ckpt_dir, step)
        state = torch.load(path, map_location=device, weights_only=True)
        step, epoch = restore(state, model, optimizer, scheduler, scaler, sampler)
    resume_step = step
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    # --8<-- [end:resume]
    report(
        "start",
        group_rank=int(os.environ["GROUP_RANK"]),
        local_rank=int(os.environ["LOCAL_RANK"]),
        world=world,
        restart=restart,
        resume_step=resume_step,
        device=str(device),
        backend=dist.get_backend(),
    )

    while step < args.steps:
        # The step says where in the epoch to go on from (> 0 after a mid-epoch resume).
        for indices in epoch_batches(sampler, per_rank)[step % STEPS_PER_EPOCH :]:
            step += 1
            # Only a fresh start crashes: the restarted attempt resumes past this step.
            if step == args.crash_at_step and rank == args.crash_rank and resume_step == 0:
                # A crash right after a save: this rank may get here while rank 0 still
                # writes the previous step, and the restart would then go back one more.
                if step > 1:
                    wait_for_file(checkpoint_path(ckpt_dir, step - 1), args.timeout)
                report("crash", step=step)
                os._exit(1)  # a hard crash: no exception handler, no `finally`
            x, y = (tensor.to(device) for tensor in dataset[indices])
            train_step(model, optimizer, scheduler, scaler, x, y)
            if step % STEPS_PER_EPOCH == 0:  # the epoch is over: the next one reshuffles
                epoch += 1
                sampler.set_epoch(epoch)
            if rank == 0:
                parts = (model.module, optimizer, scheduler, scaler, sampler)
                save_atomically(ckpt_dir, step, training_state(step, epoch, *parts))
            report("step", step=step, restart=restart)
            if step == args.steps:
                break
    report("done", params=params_hex(model.module))


def reference(steps):
    """The same training in one process, on the same global batches: what the ranks
    must match, to rounding."""
    dataset = data_set()
    sampler = DistributedSampler(dataset, 1, 0, shuffle=True, seed=SEED)
    model = new_model()
    optimizer = new_optimizer(model.parameters())
    scheduler = new_scheduler(optimizer)
    for step in range(steps):
        epoch, k = divmod(step, STEPS_PER_EPOCH)
        sampler.set_epoch(epoch)
        x, y = dataset[epoch_batches(sampler, GLOBAL_BATCH)[k]]
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()
    return model


def join_the_job(timeout):
    """Join the group torchrun (or srun) set up, as train_ddp.py does; return the device.

    A process that sees several GPUs takes the one of its LOCAL_RANK (torchrun's ranks see
    all of their node's GPUs). One that sees a single GPU takes it: under Slurm's
    --gpus-per-task=1 each task sees its own GPU, and it is cuda:0 in every task.
    """
    if torch.cuda.is_available():
        local_rank, count = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
        device = torch.device("cuda", local_rank if count > 1 else 0)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    return device


def main():
    args = parse_args()
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        sys.exit("elastic_train.py: start it with torchrun (no TORCHELASTIC_RUN_ID)")
    device = join_the_job(datetime.timedelta(seconds=args.timeout))
    try:
        train(args, device)
    finally:
        # Something train() built still holds the group in a reference cycle (not the DDP
        # model, which is freed on return). Without this collection, half of our runs on
        # torch 2.14.1 aborted at exit: "terminate called without an active exception".
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
