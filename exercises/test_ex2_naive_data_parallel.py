"""Exercise 2's tests: naive data parallelism against one process that sees the whole batch.

Two ranks build the model below from different seeds, broadcast, and train 5 steps of SGD,
each on its half of every batch. One process, starting from rank 0's seed, trains on the
whole batches. In float64 the two must agree to rounding, and the replicas must agree exactly.

The model has what real ones have and a toy one lacks: a frozen layer, a buffer, one weight
tied into two layers, and two heads. Rank r's rows go through head r, so on each rank one
head takes no part in the loss: its gradient is None there, and not on the other rank.
"""

import pytest
import torch
from ranks import load_exercise, run_ranks

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


def rank_worker(rank, world_size):
    model = Net(seed=rank)  # different weights and buffer on each rank until the broadcast
    exercise.broadcast_parameters(model)
    loss_of_step = lambda model, step: rank_loss(model, step, rank)  # noqa: E731
    return train(model, loss_of_step, exercise.average_gradients)


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


def test_every_rank_steps_with_the_full_batch_gradient(ranks, reference):
    for rank, report in enumerate(ranks):
        for name, grad in report["grads"].items():
            assert grad is not None, (
                f"after average_gradients, rank {rank}'s gradient of {name} is None: it "
                f"took no part in rank {rank}'s loss, but another rank's loss used it. Every "
                "rank must all-reduce every trainable parameter, in the same order, so give a "
                "gradient that is None zeros first"
            )
        for name, expected in reference["grads"].items():
            grad = report["grads"][name]
            difference = (grad - expected).abs().max().item()
            assert difference <= 1e-12, (
                f"after average_gradients in step 0, rank {rank}'s gradient of {name} differs "
                f"from the full-batch gradient by {difference:.3g} (skipping a gradient that "
                "is None pairs up different parameters in the ranks' all_reduces)"
            )


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
