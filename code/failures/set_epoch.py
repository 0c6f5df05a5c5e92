"""Failure: sampler.set_epoch(epoch) forgotten. Every epoch replays the first epoch's order.

    python code/failures/set_epoch.py
    python code/failures/set_epoch.py --samples 12 --ranks 3 --epochs 4 --json set_epoch.json

DistributedSampler shuffles with a generator seeded by seed + epoch, and its epoch changes only
when you call set_epoch. Nothing fails and nothing warns: each rank simply meets the same samples
in the same order every epoch. No process group is needed to see it, because the sampler takes
num_replicas and rank as arguments, so one process plays every rank.
"""

import harness
import launcher  # in code/, which harness puts on the path

args = harness.parse_args(
    __doc__,
    hangs=False,
    deadline_s=10,
    counts={
        "--samples": (8, 1, "dataset size, in samples"),
        "--ranks": (2, 1, "simulated ranks (num_replicas)"),
        "--epochs": (3, 2, "epochs to draw"),
    },
)

from torch.utils.data import DistributedSampler  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Draw every epoch's shards, with and without set_epoch
# ---------------------------------------------------------------------------------------------
def draw(call_set_epoch):
    """[epoch][rank] -> the indices that rank visits in that epoch, in order."""
    dataset = range(args.samples)
    samplers = [
        DistributedSampler(dataset, num_replicas=args.ranks, rank=rank, shuffle=True, seed=0)
        for rank in range(args.ranks)
    ]
    epochs = []
    for epoch in range(args.epochs):
        if call_set_epoch:
            for sampler in samplers:
                sampler.set_epoch(epoch)
        epochs.append([list(sampler) for sampler in samplers])
    return epochs


def main():
    report = harness.Report("set_epoch forgotten")
    report.say(
        f"{args.samples} samples, {args.ranks} ranks, DistributedSampler(shuffle=True, seed=0)"
    )
    report.say("the indices each rank visits, epoch by epoch:")
    runs = {"forgotten": draw(call_set_epoch=False), "called": draw(call_set_epoch=True)}
    titles = {"forgotten": "without set_epoch", "called": "with sampler.set_epoch(epoch)"}
    for name, epochs in runs.items():
        report.say(titles[name])
        for epoch, shards in enumerate(epochs):
            ranks = "  ".join(f"rank {rank} {shard}" for rank, shard in enumerate(shards))
            report.say(f"  epoch {epoch}  {ranks}")

    forgotten, called = runs["forgotten"], runs["called"]
    checks = {
        "without set_epoch: every epoch is epoch 0": all(e == forgotten[0] for e in forgotten),
        "with set_epoch: the order changes": any(e != called[0] for e in called[1:]),
        "either way, epoch 0 is the same draw": forgotten[0] == called[0],
        "with set_epoch: each epoch still covers the dataset": all(
            set(range(args.samples)) <= {i for shard in epoch for i in shard} for epoch in called
        ),
    }
    return report.finish(args.json, checks, epochs=runs, samples=args.samples, ranks=args.ranks)


if __name__ == "__main__":
    with harness.overall_deadline(args.deadline_s):
        status = main()
    launcher.exit_now(status)
