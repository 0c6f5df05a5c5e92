"""Failure: replicas that never started equal. Averaged gradients cannot bring them together.

    python code/failures/no_broadcast.py
    python code/failures/no_broadcast.py --steps 20 --json no_broadcast.json

Each rank seeds its own random generator (seed = rank, or a clock, or nothing) and builds its
model. A hand-written data-parallel loop all-reduces the gradients and divides by p, so every
rank applies the same update; but the same update to different weights leaves them exactly as
far apart as before, and each replica computes its gradient at its own point. Three variants
run on the same two ranks, one after the other (none of them breaks the group):

1. no broadcast: the gap between the replicas at the end is the gap at the start;
2. dist.broadcast of every parameter from rank 0 before the first step: no gap;
3. DistributedDataParallel, whose constructor does that broadcast: no gap.
"""

import harness
import launcher  # in code/, which harness puts on the path

args = harness.parse_args(
    __doc__, hangs=False, deadline_s=15, counts={"--steps": (5, 1, "training steps")}
)

import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401  (the first DDP loads it; load it once, before forking)
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

WORLD_SIZE = 2
LR = 0.1


# ---------------------------------------------------------------------------------------------
# Data, a differently seeded replica per rank, and the two ways of training it
# ---------------------------------------------------------------------------------------------
def global_batch():
    batch = torch.Generator().manual_seed(0)
    x = torch.randn(16, 4, generator=batch, dtype=torch.float64)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], dtype=torch.float64)


def replica(rank):
    torch.manual_seed(rank)  # the bug's cause: each rank initialises its own way
    return nn.Linear(4, 1).double()


def train_by_hand(model, x, y, world_size):
    for _ in range(args.steps):
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                dist.all_reduce(p.grad)  # SUM over ranks ...
                p.grad /= world_size  # ... divided by p: the mean gradient
                p -= LR * p.grad


def train_with_ddp(model, x, y):
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(args.steps):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


def gap(module):
    """Largest difference between any rank's parameters and rank 0's."""
    mine = torch.cat([p.detach().flatten() for p in module.parameters()])
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return max((other - everyone[0]).abs().max().item() for other in everyone)


def full_batch_losses(module):
    """Every rank's loss on the whole global batch: one model would give one number."""
    x, y = global_batch()
    with torch.no_grad():
        mine = F.mse_loss(module(x), y).reshape(1)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return [loss.item() for loss in everyone]


def measure(module, train):
    """Gap before and after `train()`, and every replica's loss at the end."""
    before = gap(module)
    train()
    return {"gap_before": before, "gap_after": gap(module), "losses": full_batch_losses(module)}


def three_variants(rank, world_size):
    x, y = global_batch()
    shard = slice(rank * 8, (rank + 1) * 8)  # two ranks, 8 examples each
    x_shard, y_shard = x[shard], y[shard]

    unsynced = replica(rank)

    broadcast = replica(rank)
    for p in broadcast.parameters():
        dist.broadcast(p.data, src=0)  # everyone starts from rank 0's weights

    ddp = DDP(replica(rank))  # the constructor broadcasts rank 0's parameters and buffers
    return {
        "no broadcast": measure(
            unsynced, lambda: train_by_hand(unsynced, x_shard, y_shard, world_size)
        ),
        "dist.broadcast from rank 0 first": measure(
            broadcast, lambda: train_by_hand(broadcast, x_shard, y_shard, world_size)
        ),
        "DistributedDataParallel": measure(
            ddp.module, lambda: train_with_ddp(ddp, x_shard, y_shard)
        ),
    }


# ---------------------------------------------------------------------------------------------
# Run, print, check
# ---------------------------------------------------------------------------------------------
def main():
    report = harness.Report("no initial broadcast")
    report.say(
        f"{WORLD_SIZE} ranks seeded 0 and 1, a float64 Linear(4, 1), {args.steps} SGD steps on "
        "mean gradients"
    )
    report.say(f"gap: largest parameter difference between replicas, step 0 -> step {args.steps}")
    report.say("losses: each replica's loss on the whole global batch")
    results = harness.run_one_group(
        three_variants, world_size=WORLD_SIZE, deadline_s=args.deadline_s
    )
    if not all(result.ok for result in results):
        return report.failed_unexpectedly(args.json, results)

    variants = results[0].value  # gaps and losses were gathered, so every rank holds the same
    width = max(map(len, variants))
    for name, v in variants.items():
        losses = " / ".join(f"{loss:.4f}" for loss in v["losses"])
        report.say(
            f"  {name:<{width}}  gap {v['gap_before']:.4g} -> {v['gap_after']:.4g}  losses {losses}"
        )

    unsynced, broadcast, ddp = variants.values()
    checks = {
        "no broadcast: the replicas start apart": unsynced["gap_before"] > 1e-3,
        "no broadcast: they end as far apart": abs(unsynced["gap_after"] - unsynced["gap_before"])
        < 1e-9,
        "no broadcast: the replicas disagree on the loss": len(set(unsynced["losses"])) > 1,
        "broadcast: identical throughout": broadcast["gap_before"] == broadcast["gap_after"] == 0,
        "DDP: identical throughout": ddp["gap_before"] == ddp["gap_after"] == 0,
        "fixes: one loss": len(set(broadcast["losses"])) == len(set(ddp["losses"])) == 1,
    }
    return report.finish(args.json, checks, variants=variants, steps=args.steps, results=results)


if __name__ == "__main__":
    with harness.overall_deadline(args.deadline_s):
        status = main()
    launcher.exit_now(status)
