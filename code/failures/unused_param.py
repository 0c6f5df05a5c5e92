"""Failure: a parameter that gets no gradient. DDP stops at the second iteration.

    python code/failures/unused_param.py
    python code/failures/unused_param.py --json unused.json

The model keeps a layer that forward never calls (a head left over from an experiment). DDP's
reducer waits for a gradient from every parameter before it can finish a bucket; this one never
arrives, and the next forward refuses to start. Both variants run on the same two ranks, one
after the other: the error is raised by each rank locally, before any collective, so the group
is still healthy for the fix, find_unused_parameters=True.
"""

import harness
import launcher  # in code/, which harness puts on the path

args = harness.parse_args(__doc__, hangs=False, deadline_s=15)

import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401  (the first DDP loads it; load it once, before forking)
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

WORLD_SIZE = 2
STEPS = 3


# ---------------------------------------------------------------------------------------------
# A model with a layer that forward skips, and a loop that counts how far it gets
# ---------------------------------------------------------------------------------------------
class ModelWithSpareHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.spare_head = nn.Linear(8, 1)  # defined, registered, never called
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def train(model, rank):
    """Run STEPS steps; return (steps completed, the error that stopped it or None)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        try:
            loss = model(torch.randn(8, 4, generator=batches)).pow(2).mean()
        except RuntimeError as exc:
            return step, harness.describe(exc, keep=("Parameter indices",))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return STEPS, None


def broken_then_fixed(rank, world_size):
    torch.manual_seed(0)
    broken = DDP(ModelWithSpareHead())
    broken_steps, broken_error = train(broken, rank)

    torch.manual_seed(0)
    fixed = DDP(ModelWithSpareHead(), find_unused_parameters=True)
    fixed_steps, fixed_error = train(fixed, rank)
    return {
        "broken": {"steps": broken_steps, "error": broken_error},
        "fixed": {
            "steps": fixed_steps,
            "error": fixed_error,
            "spare_head_grad_is_none": fixed.module.spare_head.weight.grad is None,
        },
    }


# ---------------------------------------------------------------------------------------------
# Run, print, check
# ---------------------------------------------------------------------------------------------
def show_broken(value):
    broken = value["broken"]
    return f"{broken['steps']} step(s) done, then {broken['error']}"


def show_fixed(value):
    fixed = value["fixed"]
    grad = "None" if fixed["spare_head_grad_is_none"] else "a tensor"
    return f"{fixed['steps']} steps done; spare_head.weight.grad is {grad}"


def main():
    report = harness.Report("unused parameter")
    report.say(f"{WORLD_SIZE} ranks, gloo; {STEPS} steps of a model with a layer it never calls")
    results = harness.run_one_group(
        broken_then_fixed, world_size=WORLD_SIZE, deadline_s=args.deadline_s
    )
    if not all(result.ok for result in results):
        return report.failed_unexpectedly(args.json, results)
    report.group("DDP(model)", results, show_broken, timed=False)
    report.group("DDP(model, find_unused_parameters=True)", results, show_fixed, timed=False)

    values = [result.value for result in results]
    checks = {
        "broken: stops before the second step": all(v["broken"]["steps"] == 1 for v in values),
        "broken: DDP names the cause": all(
            "Expected to have finished reduction in the prior iteration" in v["broken"]["error"]
            for v in values
        ),
        "fixed: every step runs": all(v["fixed"]["steps"] == STEPS for v in values),
        "fixed: the spare head still has no gradient": all(
            v["fixed"]["spare_head_grad_is_none"] for v in values
        ),
    }
    return report.finish(args.json, checks, results=results)


if __name__ == "__main__":
    with harness.overall_deadline(args.deadline_s):
        status = main()
    launcher.exit_now(status)
