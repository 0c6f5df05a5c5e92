"""Failure: a sum loss under DDP. DDP divides by the world size, so the scale is off.

    python code/failures/sum_loss.py
    python code/failures/sum_loss.py --global-batch 24 --json sum_loss.json

DDP all-reduces gradients with SUM and divides by the world size p. That average equals the
full-batch gradient only if each rank's loss is a mean over its own b = B / p examples. Each rank
here trains a float64 copy of the same Linear(5, 1) on its shard of one global batch of B, and
its DDP gradient is compared with the gradient of the mean loss over all B examples, computed
on one process without DDP:

- reduction="sum": every gradient b times too large (not p: the factor is the shard size);
- reduction="sum" divided by B, the rule for a hand-written SUM all-reduce: p times too small,
  because DDP divides by p once more;
- reduction="mean": exact. (With unequal counts per rank, such as tokens, divide the sum by the
  all-reduced global count and multiply by p.)
"""

import harness
import launcher  # in code/, which harness puts on the path

args = harness.parse_args(
    __doc__,
    hangs=False,
    deadline_s=15,
    counts={"--global-batch": (16, 2, "examples in one global batch (B), split over 2 ranks")},
)
if args.global_batch % 2:
    raise SystemExit("error: --global-batch must be even: it is split over 2 ranks")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401  (the first DDP loads it; load it once, before forking)
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

WORLD_SIZE = 2
PER_RANK = args.global_batch // WORLD_SIZE  # b = B / p, checked even above
LOSSES = {
    'mse_loss(reduction="sum")': lambda out, y: F.mse_loss(out, y, reduction="sum"),
    'mse_loss(reduction="sum") / B': lambda out, y: (
        F.mse_loss(out, y, reduction="sum") / args.global_batch
    ),
    'mse_loss(reduction="mean")': lambda out, y: F.mse_loss(out, y),
}


# ---------------------------------------------------------------------------------------------
# The global batch, the model, and one backward per loss
# ---------------------------------------------------------------------------------------------
def global_batch():
    batch = torch.Generator().manual_seed(0)  # every rank builds the same batch, then slices it
    x = torch.randn(args.global_batch, 5, generator=batch, dtype=torch.float64)
    y = torch.randn(args.global_batch, 1, generator=batch, dtype=torch.float64)
    return x, y


def fresh_model():
    torch.manual_seed(1)  # the same weights on every rank and for every variant
    return nn.Linear(5, 1).double()


def gradient(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def compare_with_full_batch(rank, world_size):
    x, y = global_batch()
    reference = fresh_model()
    F.mse_loss(reference(x), y).backward()  # mean over all B examples, one process, no DDP
    expected = gradient(reference)

    shard = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    ratios = {}
    for name, loss_fn in LOSSES.items():
        model = DDP(fresh_model())
        loss_fn(model(x[shard]), y[shard]).backward()  # DDP averages over ranks in here
        ratio = gradient(model.module) / expected
        ratios[name] = {"min": ratio.min().item(), "max": ratio.max().item()}
    return ratios


# ---------------------------------------------------------------------------------------------
# Run, print, check
# ---------------------------------------------------------------------------------------------
def main():
    report = harness.Report("sum loss under DDP")
    report.say(
        f"global batch B = {args.global_batch} on p = {WORLD_SIZE} ranks, b = {PER_RANK} each"
    )
    report.say("each rank's loss; DDP's gradient / the full-batch mean-loss gradient:")
    results = harness.run_one_group(
        compare_with_full_batch, world_size=WORLD_SIZE, deadline_s=args.deadline_s
    )
    if not all(result.ok for result in results):
        return report.failed_unexpectedly(args.json, results)

    ratios = results[0].value  # after the all-reduce every rank holds the same gradient
    width = max(map(len, LOSSES))
    for name, r in ratios.items():
        low, high = f"{r['min']:.6f}", f"{r['max']:.6f}"
        report.say(f"  {name:<{width}}  {low if low == high else f'{low} to {high}'}")

    def close(name, target):
        return all(
            abs(r.value[name][end] - target) <= 1e-9 * target
            for r in results
            for end in ("min", "max")
        )

    names = list(LOSSES)
    checks = {
        "sum: b times too large": close(names[0], PER_RANK),
        "sum / B: p times too small": close(names[1], 1 / WORLD_SIZE),
        "mean: exact": close(names[2], 1.0),
    }
    return report.finish(
        args.json,
        checks,
        ratios=ratios,
        global_batch=args.global_batch,
        world_size=WORLD_SIZE,
        per_rank=PER_RANK,
        results=results,
    )


if __name__ == "__main__":
    with harness.overall_deadline(args.deadline_s):
        status = main()
    launcher.exit_now(status)
