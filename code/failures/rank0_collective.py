"""Failure: a collective inside `if rank == 0:`. Rank 0 waits for a partner that never comes.

    python code/failures/rank0_collective.py
    python code/failures/rank0_collective.py --pg-timeout-s 5 --json rank0.json

Rank 0 all-reduces its loss to log the mean; rank 1 skips the block and walks on to the barrier
that ends the epoch. Nobody is wrong in their own eyes, and both wait forever. Three variants run
side by side, each in its own two-rank gloo group:

1. then dist.barrier(): both ranks time out with a message that blames nobody;
2. then dist.monitored_barrier(): the rank that did reach the barrier names the rank that did not;
3. the fix: every rank calls the all_reduce, and only the printing stays on rank 0.
"""

import harness
import launcher  # in code/, which harness puts on the path

args = harness.parse_args(__doc__, hangs=True, deadline_s=15)

import datetime  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

WORLD_SIZE = 2


# ---------------------------------------------------------------------------------------------
# The three variants (each function runs on every rank of its own group)
# ---------------------------------------------------------------------------------------------
def local_loss(rank):
    return torch.tensor([float(rank + 1)])  # stands in for this rank's mean loss: 1, 2, ...


def log_on_rank0_then_barrier(rank, world_size):
    loss = local_loss(rank)
    if rank == 0:
        dist.all_reduce(loss)  # the bug: rank 1 never calls this
    dist.barrier()
    return loss.item()


def log_on_rank0_then_monitored_barrier(rank, world_size):
    loss = local_loss(rank)
    if rank == 0:
        dist.all_reduce(loss)
    # It needs a group with a CPU-capable backend: gloo, or one such as "cpu:gloo,cuda:nccl"
    # (torch 2.13 took exactly "gloo"). Rank 0 collects an arrival from every other rank, so
    # a rank that did arrive can tell which one it waited for.
    timeout = datetime.timedelta(seconds=args.pg_timeout_s)
    dist.monitored_barrier(timeout=timeout, wait_all_ranks=True)
    return loss.item()


def every_rank_reduces(rank, world_size):
    loss = local_loss(rank)
    dist.all_reduce(loss)  # every rank takes part in the collective ...
    mean = loss.item() / world_size  # ... SUM, so divide for the mean
    dist.barrier()
    return mean  # ... and in a real script only rank 0 would print it


# ---------------------------------------------------------------------------------------------
# Run them, print, check
# ---------------------------------------------------------------------------------------------
def main():
    report = harness.Report("collective inside if rank == 0")
    report.say(f"{WORLD_SIZE} ranks, gloo, hung collectives give up after {args.pg_timeout_s:g} s")
    report.say("rank 0 alone calls all_reduce, then every rank calls")
    groups = harness.run_groups(
        {
            "barrier": harness.Variant(log_on_rank0_then_barrier, hangs=True),
            "monitored_barrier": harness.Variant(log_on_rank0_then_monitored_barrier, hangs=True),
            "fixed": every_rank_reduces,
        },
        world_size=WORLD_SIZE,
        deadline_s=args.deadline_s,
        hang_timeout_s=args.pg_timeout_s,
    )
    report.group("dist.barrier()", groups["barrier"])
    report.group("dist.monitored_barrier(wait_all_ranks=True)", groups["monitored_barrier"])
    report.group(
        "fixed: every rank calls all_reduce, rank 0 prints",
        groups["fixed"],
        show_value=lambda mean: f"mean loss {mean:g}",
    )

    expected_mean = sum(range(1, WORLD_SIZE + 1)) / WORLD_SIZE
    barrier, monitored, fixed = groups["barrier"], groups["monitored_barrier"], groups["fixed"]
    checks = {
        # Whichever rank times out first closes the connection, so the other may report that.
        "barrier: every rank failed, one by timeout": all(r.status == "raised" for r in barrier)
        and any("Timed out" in r.error for r in barrier),
        "monitored_barrier: rank 1 names rank 0": "from rank 0" in monitored[1].error,
        "fixed: every rank has the mean": all(r.ok and r.value == expected_mean for r in fixed),
        "broken variants ended within the timeout plus a few seconds": harness.ended_in_time(
            barrier + monitored, args.pg_timeout_s
        ),
    }
    return report.finish(args.json, checks, groups=groups, pg_timeout_s=args.pg_timeout_s)


if __name__ == "__main__":
    with harness.overall_deadline(args.deadline_s):
        status = main()
    launcher.exit_now(status)
