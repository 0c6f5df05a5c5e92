"""Failure: evaluating through DistributedSampler. Padding counts a few samples twice.

    python code/failures/eval_padding.py
    python code/failures/eval_padding.py --samples 11 --ranks 3 --json eval.json

DistributedSampler gives every rank the same number of indices. When the dataset does not
divide evenly it pads by repeating indices from the front (drop_last=False, the default), or it
cuts the tail off (drop_last=True). Either way the accuracy summed over ranks is not the
accuracy on the dataset. The validation set here is stored class by class, as an image folder
would list it, and the "model" always answers class 0, so the front is where it is right.

Sharding with range(rank, len(dataset), world_size) gives ranks unequal shares and no repeats;
summing the correct and seen counts over ranks (one all_reduce in a real job) is then exact.
No process group is needed: the sampler takes num_replicas and rank as arguments.
"""

import harness
import launcher  # in code/, which harness puts on the path

args = harness.parse_args(
    __doc__,
    hangs=False,
    deadline_s=10,
    counts={
        "--samples": (10, 2, "validation samples; the first 60 %% are class 0"),
        "--ranks": (4, 2, "simulated ranks (num_replicas)"),
    },
)
if args.samples % args.ranks == 0:
    raise SystemExit("error: pick --samples not divisible by --ranks, or there is nothing to pad")

import torch  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

CLASS0 = args.samples * 3 // 5
LABELS = torch.tensor([0] * CLASS0 + [1] * (args.samples - CLASS0))


def predict(indices):
    return torch.zeros(len(indices), dtype=torch.long)  # a model that learned only class 0


# ---------------------------------------------------------------------------------------------
# Three ways to shard the validation set; each rank counts, the counts are summed over ranks
# ---------------------------------------------------------------------------------------------
def sampler_shards(drop_last):  # shuffle=False, as evaluation usually runs
    return [
        list(DistributedSampler(LABELS, args.ranks, rank, shuffle=False, drop_last=drop_last))
        for rank in range(args.ranks)
    ]


def strided_shards():
    return [list(range(rank, args.samples, args.ranks)) for rank in range(args.ranks)]


def evaluate(shards):
    """What all_reduce(SUM) of each rank's (correct, seen) would give, and what was visited."""
    correct = sum(int((predict(ix) == LABELS[ix]).sum()) for ix in shards if ix)
    visited = [i for shard in shards for i in shard]
    return {
        "correct": correct,
        "seen": len(visited),
        "accuracy": correct / len(visited),
        "counted_twice": sorted({i for i in visited if visited.count(i) > 1}),
        "never_seen": sorted(set(range(args.samples)) - set(visited)),
    }


def main():
    report = harness.Report("evaluation through DistributedSampler")
    truth = int((predict(range(args.samples)) == LABELS).sum()) / args.samples
    report.say(
        f"{args.samples} validation samples, the first {CLASS0} of class 0, on {args.ranks} ranks"
    )
    report.say(f"a model that always answers 0: true accuracy {truth:.1%}")
    report.say("correct / seen, summed over ranks, by how the ranks split the samples:")
    results = {
        "DistributedSampler": evaluate(sampler_shards(drop_last=False)),
        "DistributedSampler(drop_last=True)": evaluate(sampler_shards(drop_last=True)),
        "range(rank, N, world_size)": evaluate(strided_shards()),
    }
    width = max(map(len, results))
    for name, r in results.items():
        notes = [f"counted twice: {r['counted_twice']}"] if r["counted_twice"] else []
        notes += [f"never seen: {r['never_seen']}"] if r["never_seen"] else []
        report.say(
            f"  {name:<{width}}  {r['correct']:>2} / {r['seen']:>2} = "
            f"{r['accuracy']:.1%}  {'; '.join(notes)}".rstrip()
        )

    padded, dropped, strided = results.values()
    checks = {
        "padding: some samples counted twice": bool(padded["counted_twice"]),
        "padding: the accuracy is too high": padded["accuracy"] > truth,
        "drop_last: some samples never seen": bool(dropped["never_seen"]),
        "drop_last: the accuracy is too high": dropped["accuracy"] > truth,
        "strided shards: every sample once, the true accuracy": strided["seen"] == args.samples
        and not strided["counted_twice"]
        and strided["accuracy"] == truth,
    }
    return report.finish(
        args.json, checks, true_accuracy=truth, shardings=results, samples=args.samples
    )


if __name__ == "__main__":
    with harness.overall_deadline(args.deadline_s):
        status = main()
    launcher.exit_now(status)
