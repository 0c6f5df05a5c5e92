"""Failure: one rank has a batch more than the other. The epoch never ends.

    python code/failures/uneven_inputs.py
    python code/failures/uneven_inputs.py --json uneven.json

Rank 0 holds 3 batches, rank 1 only 2. After its last batch rank 1 leaves the loop, while rank 0
starts a third backward whose gradient all-reduce has no partner. Four variants run side by
side, each in its own two-rank gloo group:

1. plain DDP: rank 0 times out in its third step, rank 1 at the next collective after its loop;
2. the same loop inside `Join([model])`: the rank that runs out first keeps answering DDP's
   all-reduces with zeros until the other one is done, and the replicas end identical;
3. Join, plus the loss all-reduced after every step for logging: Join stands in only for DDP's
   own collectives, so from the extra step on the two ranks' calls are out of step;
4. Join, plus a barrier after every step: nothing on the finished rank answers it.
"""

import harness
import launcher  # in code/, which harness puts on the path

args = harness.parse_args(__doc__, hangs=True, deadline_s=15)

import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401  (the first DDP loads it; load it once, before forking)
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.algorithms.join import Join  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

WORLD_SIZE = 2
BATCHES = {0: 3, 1: 2}  # rank -> number of batches it holds


# ---------------------------------------------------------------------------------------------
# One training loop; the variants differ in Join and in an extra collective of our own
# ---------------------------------------------------------------------------------------------
def log_mean_loss(loss):
    dist.all_reduce(loss.detach().clone())  # averaging the loss for a log line (result unused)


def step_barrier(loss):
    dist.barrier()


def train(rank, *, join, after_step=None):
    """Train on this rank's batches; return how far it got and, if it failed, where and why."""
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = torch.Generator().manual_seed(rank)
    steps, where = 0, "setup"
    try:
        with Join([model], enable=join):  # enable=False makes Join a no-op: the plain DDP loop
            for step in range(1, BATCHES[rank] + 1):
                where = f"step {step}"
                loss = model(torch.randn(8, 4, generator=batches)).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if after_step is not None:
                    after_step(loss)
                steps = step
            where = "the exit of Join"
        where = "the replica check after the loop"  # stands for whatever collective comes next
        identical = replicas_identical(model)
    except Exception as exc:  # a timeout, or whatever a mismatched collective led to
        return {"steps": steps, "failed_in": where, "error": harness.describe(exc)}
    return {"steps": steps, "replicas_identical": identical}


def replicas_identical(model):
    """Gather every rank's parameters and compare them with rank 0's, bit for bit."""
    mine = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return all(torch.equal(everyone[0], other) for other in everyone)


def plain(rank, world_size):
    return train(rank, join=False)


def joined(rank, world_size):
    return train(rank, join=True)


def joined_with_loss_all_reduce(rank, world_size):
    return train(rank, join=True, after_step=log_mean_loss)


def joined_with_barrier(rank, world_size):
    return train(rank, join=True, after_step=step_barrier)


# ---------------------------------------------------------------------------------------------
# Run, print, check
# ---------------------------------------------------------------------------------------------
def show(value):
    if "error" in value:
        return f"{value['steps']} steps, then failed at {value['failed_in']}: {value['error']}"
    same = "identical" if value["replicas_identical"] else "DIFFERENT"
    return f"{value['steps']} steps, replicas {same}"


def main():
    report = harness.Report("uneven inputs")
    report.say(f"{WORLD_SIZE} ranks, gloo, hung collectives give up after {args.pg_timeout_s:g} s")
    report.say(f"rank 0 holds {BATCHES[0]} batches, rank 1 holds {BATCHES[1]}")
    groups = harness.run_groups(
        {
            "plain": harness.Variant(plain, hangs=True),
            "join": joined,
            "join_loss_all_reduce": harness.Variant(joined_with_loss_all_reduce, hangs=True),
            "join_barrier": harness.Variant(joined_with_barrier, hangs=True),
        },
        world_size=WORLD_SIZE,
        deadline_s=args.deadline_s,
        hang_timeout_s=args.pg_timeout_s,
    )
    report.group("DDP, no Join", groups["plain"], show)
    report.group("with Join([model]) around the loop", groups["join"], show)
    report.group(
        "Join, and the loss all-reduced after each step", groups["join_loss_all_reduce"], show
    )
    report.group("Join, and dist.barrier() after each step", groups["join_barrier"], show)

    plain_results, join_results = groups["plain"], groups["join"]
    own0, own1 = groups["join_loss_all_reduce"]
    rank0, rank1 = (result.value or {} for result in plain_results)
    checks = {
        "no Join: rank 0 fails in its last step": rank0.get("failed_in") == f"step {BATCHES[0]}",
        "no Join: rank 1 does its steps, then fails at its next collective": rank1.get("steps")
        == BATCHES[1]
        and rank1.get("failed_in") == "the replica check after the loop",
        "Join: every rank does its own steps": all(
            r.ok and r.value["steps"] == BATCHES[r.rank] for r in join_results
        ),
        "Join: replicas identical": all(
            r.ok and r.value.get("replicas_identical") for r in join_results
        ),
        # From rank 1's last step on, each call meets a different one on rank 0: rank 1's loss
        # all-reduce receives more bytes than it holds, and only rank 1 is killed for it.
        "Join plus an all-reduce of our own: rank 0 fails with a TypeError at Join's exit": (
            own0.ok and own0.value.get("failed_in") == "the exit of Join"
        )
        and own0.value.get("error", "").startswith("TypeError"),
        "Join plus an all-reduce of our own: rank 1 alone aborts on the size mismatch": (
            own1.status == "died" and "SIGABRT" in own1.error
        )
        and "Received data size doesn't match expected size" in own1.error,
        "Join plus a barrier of our own: it times out": any(
            "Timed out" in r.value.get("error", "") for r in groups["join_barrier"] if r.ok
        ),
        "every rank ended within the timeout plus a few seconds": harness.ended_in_time(
            [r for results in groups.values() for r in results], args.pg_timeout_s
        ),
    }
    return report.finish(args.json, checks, groups=groups, batches=BATCHES)


if __name__ == "__main__":
    with harness.overall_deadline(args.deadline_s):
        status = main()
    launcher.exit_now(status)
