"""Exercise 2's tests: naive data parallelism against one process that sees the whole batch.

Two ranks build their models from different seeds, broadcast, and train 3 steps of SGD, each
on its half of every batch. One process, starting from rank 0's seed, trains on the whole
batches. In float64 the two must agree to rounding, and the replicas must agree exactly.
"""

import pytest
import torch
from ranks import load_exercise, run_ranks

exercise = load_exercise("ex2_naive_data_parallel")

WORLD_SIZE, STEPS, BATCH, LR = 2, 3, 8, 0.1


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
    ).double()


def batch(step):
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, 4, generator=generator, dtype=torch.float64)
    return x, x.sum(dim=1, keepdim=True).sin()


def train(model, rows, step_hook):
    """SGD for STEPS steps on the given rows of each batch; step_hook runs after backward."""
    for step in range(STEPS):
        x, y = batch(step)
        loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])  # a mean over the rows
        model.zero_grad()
        loss.backward()
        step_hook(model)
        with torch.no_grad():
            for param in model.parameters():
                param -= LR * param.grad
    return torch.cat([param.detach().flatten() for param in model.parameters()])


def rank_worker(rank, world_size):
    model = make_model(seed=rank)  # different on each rank until the broadcast
    exercise.broadcast_parameters(model)
    half = slice(rank * BATCH // world_size, (rank + 1) * BATCH // world_size)
    return train(model, half, exercise.average_gradients)


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(rank_worker, WORLD_SIZE, "exercise 2's training steps")


@pytest.fixture(scope="module")
def reference():
    return train(make_model(seed=0), slice(None), lambda model: None)


def test_training_matches_the_full_batch_reference(ranks, reference):
    for rank, params in enumerate(ranks):
        difference = (params - reference).abs().max().item()
        assert difference <= 1e-12, (
            f"after {STEPS} steps, rank {rank}'s parameters differ from the full-batch "
            f"reference by {difference:.3g}"
        )


def test_replicas_are_bit_identical(ranks):
    for rank, params in enumerate(ranks[1:], start=1):
        assert torch.equal(params, ranks[0]), (
            f"after {STEPS} steps, rank {rank}'s parameters differ from rank 0's by "
            f"{(params - ranks[0]).abs().max().item():.3g}"
        )
