"""Exercise 2's tests: naive data parallelism against one process that sees the whole batch.

Two ranks build the model below from different seeds, broadcast, and train 5 steps of SGD,
each on its half of every batch. One process, starting from rank 0's seed, trains on the
whole batches. In float64 the two must agree to rounding, and the replicas must agree exactly.

The model has what real ones have and a toy one lacks: a frozen layer, a buffer, one weight
tied into two layers, and two heads. Rank r's rows go through head r, so on each rank one
head takes no part in the loss: its gradient is None there, and not on the other rank.
"""

import math

import pytest
import torch
from ranks import Explained, load_exercise, run_ranks

exercise = load_exercise("ex2_naive_data_parallel")

WORLD_SIZE, STEPS, BATCH, LR = 2, 5, 8, 0.1
ROWS = BATCH // WORLD_SIZE  # each rank's half of a batch
F64 = {"dtype": torch.float64}


class Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Linear(4, 8, **F64).requires_grad_(False)  # frozen
        self.register_buffer("shift", torch.randn(8, **F64))  # a buffer, not a parameter
        self.encode = torch.nn.Linear(8, 8, **F64)
        self.decode = torch.nn.Linear(8, 8, **F64)
        self.decode.weight = self.encode.weight  # tied: one parameter, used twice
        self.heads = torch.nn.ModuleList([torch.nn.Linear(8, 1, **F64) for _ in range(2)])

    def forward(self, x, head):
        hidden = torch.tanh(self.encode(self.embed(x) + self.shift))
        return self.heads[head](torch.tanh(self.decode(hidden)))


def describe(model, name):
    """How a message names an entry of the model's state_dict."""
    if name in dict(model.named_buffers()):
        return f"{name} (a buffer)"
    return name if model.get_parameter(name).requires_grad else f"{name} (frozen)"


def batch(step):
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, 4, generator=generator, **F64)
    return x, x.sum(dim=1, keepdim=True).sin()


def rank_loss(model, step, rank):
    """Rank `rank`'s rows of the batch, through head `rank`: a mean over its rows."""
    x, y = batch(step)
    rows = slice(rank * ROWS, (rank + 1) * ROWS)
    return torch.nn.functional.mse_loss(model(x[rows], head=rank), y[rows])


def full_batch_loss(model, step):
    # The mean over every row is the mean of the ranks' losses: their halves are equal.
    return sum(rank_loss(model, step, rank) for rank in range(WORLD_SIZE)) / WORLD_SIZE


def state(model):
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def train(model, loss_of_step, step_hook):
    """SGD for STEPS steps; step_hook runs after each backward. The first step's gradients,
    and the state before and after, are what the tests compare."""
    start, first_grads = state(model), None
    for step in range(STEPS):
        model.zero_grad()  # every .grad None again, as an optimizer leaves it
        loss_of_step(model, step).backward()
        step_hook(model)
        if first_grads is None:
            first_grads = {
                name: None if param.grad is None else param.grad.clone()
                for name, param in model.named_parameters()
                if param.requires_grad
            }
        with torch.no_grad():
            for param in model.parameters():
                if param.grad is not None:  # as torch.optim does: no gradient, no step
                    param -= LR * param.grad
    return {"start": start, "grads": first_grads, "end": state(model)}


def trainable_without_grad(model):
    return [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]


def average_gradients_naming_none(model, rank):
    """The learner's average_gradients; if it trips over a gradient that is None, say which.

    torch's all_reduce(None) says only that it got a NoneType, and Python's `/=` on a None
    names no parameter either; neither says why a gradient is None on this rank.
    """
    none = trainable_without_grad(model)
    try:
        exercise.average_gradients(model)
    except (TypeError, AttributeError) as error:  # what torch and Python raise given a None
        if not none:
            raise
        raise Explained(
            f"raised {type(error).__name__} in average_gradients, where .grad is None for "
            f"{', '.join(none)}: these parameters took no part in rank {rank}'s loss, but "
            "another rank's loss used them. Give a gradient that is None zeros first "
            "(torch.zeros_like(param)), so that every rank all-reduces every trainable "
            f"parameter in the same order. The error itself: {' '.join(str(error).split())}"
        ) from error


def rank_worker(rank, world_size):
    model = Net(seed=rank)  # different weights and buffer on each rank until the broadcast
    exercise.broadcast_parameters(model)
    loss_of_step = lambda model, step: rank_loss(model, step, rank)  # noqa: E731
    return train(model, loss_of_step, lambda model: average_gradients_naming_none(model, rank))


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(rank_worker, WORLD_SIZE, "exercise 2's training steps")


@pytest.fixture(scope="module")
def reference():
    return train(Net(seed=0), full_batch_loss, lambda model: None)


def test_every_rank_starts_from_rank_0s_parameters_and_buffers(ranks, reference):
    model = Net(seed=0)
    for rank, report in enumerate(ranks):
        differ = [
            describe(model, name)
            for name, tensor in report["start"].items()
            if not torch.equal(tensor, reference["start"][name])
        ]
        assert not differ, (
            f"after broadcast_parameters, rank {rank}'s {', '.join(differ)} "
            f"{'differ' if len(differ) > 1 else 'differs'} from rank 0's, and the ranks built "
            "their models from different seeds: broadcast every "
            "parameter, frozen ones too, and every buffer"
        )


def unused_on_some_rank():
    """The trainable parameters that some rank's loss leaves without a gradient: the heads."""
    unused = set()
    for rank in range(WORLD_SIZE):
        model = Net(seed=0)
        rank_loss(model, 0, rank).backward()
        unused |= set(trainable_without_grad(model))
    return unused


def common_factor(grads, expected):
    """c if every gradient here is c times its expected one (to rounding), else None."""
    factors = []
    for name, grad in grads.items():
        want = expected[name]
        if not want.any():
            return None
        factor = (grad * want).sum().item() / (want * want).sum().item()
        if (grad - factor * want).abs().max().item() > 1e-9 * want.abs().max().item():
            return None
        factors.append(factor)
    same = all(math.isclose(f, factors[0], rel_tol=1e-9) for f in factors)
    return factors[0] if factors and same else None


def scaled_words(factor):
    """What a gradient off by one factor everywhere says about the division."""
    if math.isclose(factor, WORLD_SIZE, rel_tol=1e-9):
        return (
            f"{WORLD_SIZE} times the full-batch gradient: dist.all_reduce sums over the "
            f"{WORLD_SIZE} ranks, so divide the sum by dist.get_world_size() for the mean"
        )
    if math.isclose(factor, 1 / WORLD_SIZE, rel_tol=1e-9):
        return (
            f"1/{WORLD_SIZE} of the full-batch gradient: divided by the world size twice? "
            "Divide all_reduce's sum by dist.get_world_size() once"
        )
    return (
        f"{factor:.3g} times the full-batch gradient: the mean is all_reduce's sum divided by "
        "dist.get_world_size(), once"
    )


def gradient_faults(rank, grads, expected, unused):
    """What is wrong with one rank's gradients after average_gradients, likeliest cause first,
    as (rank of likeliness, message): a gradient left None; every wrong one off by the same
    factor (the division); wrong ones only where some rank has no gradient (skipped there,
    so the ranks' all_reduces paired different parameters); anything else, as it is."""
    none = [
        (
            0,
            f"after average_gradients, rank {rank}'s gradient of {name} is None: it took no "
            f"part in rank {rank}'s loss, but another rank's loss used it. Every rank must "
            "all-reduce every trainable parameter, in the same order, so give a gradient that "
            "is None zeros first",
        )
        for name, grad in grads.items()
        if grad is None
    ]
    if none:
        return none
    off = {name: (grads[name] - want).abs().max().item() for name, want in expected.items()}
    wrong = {name: difference for name, difference in off.items() if difference > 1e-12}
    if not wrong:
        return []
    factor = common_factor({name: grads[name] for name in wrong}, expected)
    if factor is not None:
        which = (
            f"every gradient on rank {rank}"
            if len(wrong) == len(expected)
            else f"rank {rank}'s gradient of {', '.join(wrong)}"
        )
        return [(1, f"after average_gradients in step 0, {which} is {scaled_words(factor)}")]
    if set(wrong) <= unused:
        return [
            (
                2,
                f"after average_gradients in step 0, rank {rank}'s gradient of "
                f"{', '.join(wrong)} differs from the full-batch gradient by up to "
                f"{max(wrong.values()):.3g}, and these parameters, the only wrong ones, have "
                "no gradient on some rank: skipping a gradient that is None pairs up different "
                "parameters in the ranks' all_reduces, so give it zeros first",
            )
        ]
    return [
        (
            3,
            f"after average_gradients in step 0, rank {rank}'s gradient of {name} differs from "
            f"the full-batch gradient by {difference:.3g}",
        )
        for name, difference in wrong.items()
    ]


def test_every_rank_steps_with_the_full_batch_gradient(ranks, reference):
    unused = unused_on_some_rank()
    faults = [
        fault
        for rank, report in enumerate(ranks)
        for fault in gradient_faults(rank, report["grads"], reference["grads"], unused)
    ]
    # Every fault found, one a line, the likeliest cause first (sorted keeps rank order).
    messages = [message for _, message in sorted(faults, key=lambda fault: fault[0])]
    assert not messages, "\n".join(messages)


def test_training_matches_the_full_batch_reference(ranks, reference):
    for rank, report in enumerate(ranks):
        for name, expected in reference["end"].items():
            difference = (report["end"][name] - expected).abs().max().item()
            assert difference <= 1e-12, (
                f"after {STEPS} steps, rank {rank}'s {name} differs from the full-batch "
                f"reference by {difference:.3g}"
            )


def test_replicas_are_bit_identical(ranks):
    for rank, report in enumerate(ranks[1:], start=1):
        for name, tensor in report["end"].items():
            mine = ranks[0]["end"][name]
            assert torch.equal(tensor, mine), (
                f"after {STEPS} steps, rank {rank}'s {name} differs from rank 0's by "
                f"{(tensor - mine).abs().max().item():.3g}"
            )
