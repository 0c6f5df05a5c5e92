"""Failure: BatchNorm under DDP normalises each rank's shard with that shard's own statistics.

    python code/failures/batchnorm.py
    python code/failures/batchnorm.py --rows 64 --json batchnorm.json

DDP averages gradients, but a BatchNorm layer in training mode computes its mean and variance
in the forward pass, over the examples on its own rank. With p ranks the model therefore
normalises p small batches, not one global batch, and its output is not the single-process
output. Everything below runs on the same two ranks, one step after the other:

1. BatchNorm1d under DDP: each rank's batch mean and its output, against one process that sees
   the whole batch;
2. SyncBatchNorm, the usual fix, on CPU: DDP refuses it at construction, and a forward pass
   inside a process group refuses a CPU tensor (SyncBatchNorm needs CUDA, XPU or HPU);
3. what SyncBatchNorm computes, done by hand: each rank's (mean, invstd, count) all-gathered,
   as SyncBatchNorm does, then combined into the full-batch statistics, which give the
   full-batch output on every rank.
"""

import harness
import launcher  # in code/, which harness puts on the path

args = harness.parse_args(
    __doc__, hangs=False, deadline_s=15, counts={"--rows": (16, 4, "rows in the global batch")}
)
if args.rows % 2:
    raise SystemExit("error: --rows must be even: the batch is split over 2 ranks")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401  (the first DDP loads it; load it once, before forking)
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

WORLD_SIZE = 2
FEATURES = 3
PER_RANK = args.rows // WORLD_SIZE


# ---------------------------------------------------------------------------------------------
# The batch, the single-process reference, and the three steps
# ---------------------------------------------------------------------------------------------
def global_batch():
    batch = torch.Generator().manual_seed(0)  # every rank builds the same batch, then slices it
    x = torch.randn(args.rows, FEATURES, generator=batch, dtype=torch.float64)
    return x * torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64) + torch.tensor([0.0, 1.0, -1.0])


def batchnorm():
    # momentum=1.0: after one forward, running_mean is exactly the mean that forward used.
    return nn.BatchNorm1d(FEATURES, momentum=1.0).double()


def plain_batchnorm_under_ddp(x_shard):
    model = DDP(batchnorm())
    out = model(x_shard)
    return model.module.running_mean.clone(), out.detach()


def sync_batchnorm_refusals(x_shard):
    refusals = {}
    try:
        DDP(nn.SyncBatchNorm.convert_sync_batchnorm(batchnorm()))
    except ValueError as exc:
        refusals["DDP(convert_sync_batchnorm(model))"] = harness.describe(exc)  # at construction
    try:
        nn.SyncBatchNorm.convert_sync_batchnorm(batchnorm())(x_shard)
    except ValueError as exc:
        refusals["convert_sync_batchnorm(model)(x)"] = harness.describe(exc)
    return refusals


def batchnorm_with_gathered_statistics(x_shard, eps=1e-5):
    """SyncBatchNorm's forward: all-gather every rank's (mean, invstd, count), then combine.

    It gathers rather than all-reduces because the counts may differ between ranks; the
    combination is batch_norm_gather_stats_with_counts's, which has no CPU kernel.
    """
    mean = x_shard.mean(0)
    invstd = torch.rsqrt(x_shard.var(0, correction=0) + eps)  # BatchNorm's biased variance
    count = torch.full((1,), float(len(x_shard)), dtype=torch.float64)
    gathered = [torch.empty(2 * FEATURES + 1, dtype=torch.float64) for _ in range(WORLD_SIZE)]
    dist.all_gather(gathered, torch.cat([mean, invstd, count]))
    means, invstds, counts = torch.stack(gathered).split([FEATURES, FEATURES, 1], dim=1)
    total = counts.sum()
    mean = (counts * means).sum(0) / total
    # Each rank's variance back from its invstd, then spread within ranks plus between them.
    variances = invstds.pow(-2) - eps
    variance = (counts * (variances + (means - mean) ** 2)).sum(0) / total
    return mean, (x_shard - mean) * torch.rsqrt(variance + eps)  # weight 1, bias 0 at init


def three_steps(rank, world_size):
    x = global_batch()
    reference = batchnorm()
    full_out = reference(x).detach()  # one process, the whole batch
    shard = slice(rank * PER_RANK, (rank + 1) * PER_RANK)

    ddp_mean, ddp_out = plain_batchnorm_under_ddp(x[shard])
    refusals = sync_batchnorm_refusals(x[shard])
    synced_mean, synced_out = batchnorm_with_gathered_statistics(x[shard])
    return {
        "full_mean": reference.running_mean.tolist(),
        "ddp_mean": ddp_mean.tolist(),
        "ddp_output_error": (ddp_out - full_out[shard]).abs().max().item(),
        "refusals": refusals,
        "synced_mean": synced_mean.tolist(),
        "synced_output_error": (synced_out - full_out[shard]).abs().max().item(),
    }


# ---------------------------------------------------------------------------------------------
# Run, print, check
# ---------------------------------------------------------------------------------------------
def vector(values):
    return "[" + ", ".join(f"{v:+.3f}" for v in values) + "]"


def main():
    report = harness.Report("BatchNorm under DDP")
    report.say(
        f"{args.rows} rows x {FEATURES} features in float64, {PER_RANK} rows per rank; "
        "BatchNorm1d in training mode"
    )
    results = harness.run_one_group(three_steps, world_size=WORLD_SIZE, deadline_s=args.deadline_s)
    if not all(result.ok for result in results):
        return report.failed_unexpectedly(args.json, results)

    values = [result.value for result in results]
    report.say(f"one process, whole batch:  mean {vector(values[0]['full_mean'])}")
    report.say("BatchNorm1d under DDP:")
    for rank, v in enumerate(values):
        report.say(
            f"  rank {rank}  mean {vector(v['ddp_mean'])}  "
            f"output off by up to {v['ddp_output_error']:.3g}"
        )
    report.say("SyncBatchNorm on CPU:")
    for what, error in values[0]["refusals"].items():
        report.say(f"  {what}:")
        report.say(f"    {error}")
    report.say("(mean, invstd, count) all-gathered and combined, as SyncBatchNorm does on a GPU:")
    for rank, v in enumerate(values):
        report.say(
            f"  rank {rank}  mean {vector(v['synced_mean'])}  "
            f"output off by up to {v['synced_output_error']:.3g}"
        )

    construct, forward = "DDP(convert_sync_batchnorm(model))", "convert_sync_batchnorm(model)(x)"

    def mean_gap(v, key):
        return max(abs(a - b) for a, b in zip(v[key], v["full_mean"], strict=True))

    checks = {
        "DDP: every rank's mean differs from the full batch's": all(
            mean_gap(v, "ddp_mean") > 1e-3 for v in values
        ),
        "DDP: every rank's output differs": all(v["ddp_output_error"] > 1e-3 for v in values),
        "SyncBatchNorm: DDP refuses it on CPU": all(
            "only work with GPU modules" in v["refusals"].get(construct, "") for v in values
        ),
        "SyncBatchNorm: forward refuses a CPU tensor": all(
            "expected input tensor to be on GPU" in v["refusals"].get(forward, "") for v in values
        ),
        "gathered statistics: the full batch's": all(
            mean_gap(v, "synced_mean") < 1e-12 and v["synced_output_error"] < 1e-10 for v in values
        ),
    }
    return report.finish(args.json, checks, ranks=values, rows=args.rows, results=results)


if __name__ == "__main__":
    with harness.overall_deadline(args.deadline_s):
        status = main()
    launcher.exit_now(status)
