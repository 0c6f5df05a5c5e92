"""Exercise 8: convert your own script.

This is a single-device training script. Make it an elastic-ready DDP script: torchrun
starts it on two ranks with --max_restarts=1, the tests kill a rank once mid-run (and once
halfway through writing a checkpoint), torchrun starts every rank again from the first line,
and the job must still end on exactly the parameters, every float64 bit, of a run that was
never interrupted. It must also train what this script trains: each step the same BATCH
examples, split over the ranks.

    python ex8_convert_your_script.py                          # as it is: one process
    torchrun --standalone --nproc_per_node=2 --max_restarts=1 \
        ex8_convert_your_script.py --ckpt-dir=ckpt             # once converted
    python -m pytest test_ex8_convert_your_script.py

What the job needs, in the course's words (chapter 5): a process group and DDP; each rank
its share of every batch; a checkpoint after every step, written so that a crash mid-write
never leaves half a file under a checkpoint's name, into --ckpt-dir; and at start, on every
rank and before DDP wraps the model, a resume from the newest complete checkpoint that puts
back everything the next step depends on. Keep the settings, make_dataset, DropoutLinear
and report_final as they are, and call report_final(model) on every rank at the end.
"""

import argparse
import json
import os
import sys

import torch

# torch._dynamo comes before the process group: first imported after it (as the
# first DDP or torch.optim use does), it keeps the group alive past
# destroy_process_group, and the exit can abort (chapter 4).
import torch._dynamo  # noqa: F401
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt-dir", default=os.environ.get("CKPT_DIR", "ckpt"))
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(SEED)
    dataset = make_dataset()
    # One process takes every example. The sampler shuffles with SEED plus its epoch, so
    # each epoch gets a new order, and every run the same ones.
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=SEED)
    model = DropoutLinear()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)

    step, epoch = 0, 0
    while step < args.steps:
        for indices in batches(sampler, BATCH):
            x, y = dataset[indices]
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % STEPS_PER_EPOCH == 0:  # the epoch is over: the next one reshuffles
                epoch += 1
                sampler.set_epoch(epoch)
            if step == args.steps:
                break
    report_final(model)


if __name__ == "__main__":
    main()
