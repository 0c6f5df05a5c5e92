"""Exercise 8: convert your own script.

A single-device training script, made elastic-ready DDP: torchrun may kill any rank at any
moment and restart them all, and the job still ends on the very parameters of a run that
was never interrupted.

    torchrun --standalone --nproc_per_node=2 --max_restarts=1 \
        ex8_convert_your_script.py --ckpt-dir=ckpt
"""

import argparse
import json
import os
import pathlib
import sys

import torch

# torch._dynamo comes before the process group: first imported after it (as the
# first DDP or torch.optim use does), it keeps the group alive past
# destroy_process_group, and the exit can abort (chapter 4).
import torch._dynamo  # noqa: F401
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler, TensorDataset

# Keep these as they are: the tests train the same model in one process to compare.
SAMPLES, FEATURES, SEED = 64, 8, 8
BATCH = 16  # examples per step, over all ranks together
STEPS_PER_EPOCH = SAMPLES // BATCH
LR, MOMENTUM, DROP = 0.05, 0.9, 0.25


def make_dataset():
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(SAMPLES, FEATURES, generator=generator, dtype=torch.float64)
    w = torch.randn(FEATURES, 1, generator=generator, dtype=torch.float64)
    return TensorDataset(x, x @ w)


class DropoutLinear(torch.nn.Module):
    """A linear model whose inputs lose random features: one mask per step, from torch's
    global generator."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(FEATURES, 1, dtype=torch.float64)

    def forward(self, x):
        keep = (torch.rand(1, FEATURES, dtype=x.dtype) >= DROP).to(x.dtype)
        return self.linear(x * keep / (1 - DROP))


def report_final(model):
    """Print the trained parameters for the tests, exactly (float.hex), one line per rank."""
    module = getattr(model, "module", model)
    values = [v.hex() for p in module.parameters() for v in p.detach().flatten().tolist()]
    line = {"event": "final", "rank": int(os.environ.get("RANK", 0)), "params": values}
    # One write per line: the ranks share stdout, and print() writes the text and its
    # newline in two calls, between which another rank's line can land.
    sys.stdout.write("@@ " + json.dumps(line) + "\n")
    sys.stdout.flush()


def batches(sampler, per_rank):
    """This rank's batches of the sampler's current epoch, in order."""
    order = list(sampler)
    return [order[i : i + per_rank] for i in range(0, len(order), per_rank)]


def save_atomically(ckpt_dir, step, state):
    """A temporary file, forced to disk, then renamed: no crash leaves half a checkpoint
    under a checkpoint's name."""
    final = ckpt_dir / f"step-{step:04d}.pt"
    tmp = final.with_suffix(".tmp")
    with open(tmp, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, final)
    for old in sorted(ckpt_dir.glob("step-*.pt"))[:-2]:  # keep the newest two
        old.unlink()


def newest_step(ckpt_dir):
    """The newest complete checkpoint's step, agreed by every rank (0: none)."""
    found = sorted(ckpt_dir.glob("step-*.pt")) if dist.get_rank() == 0 else []
    step = torch.tensor([int(found[-1].stem.removeprefix("step-")) if found else 0])
    dist.broadcast(step, src=0)  # rank 0 looks, so that a save meanwhile cannot split them
    return int(step)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt-dir", default=os.environ.get("CKPT_DIR", "ckpt"))
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    ckpt_dir = pathlib.Path(args.ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert BATCH % world == 0, f"{BATCH} examples do not split over {world} ranks"
    torch.manual_seed(SEED)  # every rank alike: the same weights and dropout masks
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=SEED)
    net = DropoutLinear()  # the model itself; DDP wraps it below
    optimizer = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)

    # Resume on every rank, before DDP wraps the model.
    step, epoch = newest_step(ckpt_dir), 0
    if step:
        state = torch.load(ckpt_dir / f"step-{step:04d}.pt", weights_only=True)
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        sampler.set_epoch(state["sampler_epoch"])
        torch.set_rng_state(state["rng"])
        epoch = state["epoch"]
    model = DDP(net)

    while step < args.steps:
        # The step says where in the epoch to go on from (> 0 after a mid-epoch resume).
        for indices in batches(sampler, BATCH // world)[step % STEPS_PER_EPOCH :]:
            x, y = dataset[indices]
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % STEPS_PER_EPOCH == 0:  # the epoch is over: the next one reshuffles
                epoch += 1
                sampler.set_epoch(epoch)
            if rank == 0:
                state = {
                    "step": step,
                    "epoch": epoch,
                    "sampler_epoch": sampler.epoch,
                    "model": net.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "rng": torch.get_rng_state(),  # the same on every rank
                }
                save_atomically(ckpt_dir, step, state)
            if step == args.steps:
                break
    report_final(model)
    del model  # DDP goes before its process group
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
