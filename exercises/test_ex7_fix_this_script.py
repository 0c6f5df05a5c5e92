"""Exercise 7's tests: what the fixed script does (not how it was fixed).

Two ranks run main under a short timeout. It must finish; each epoch must visit the samples
in a new order (and every sample once over the ranks); and the evaluation must count every
sample exactly once, so its total loss is the loss on the dataset of the final weights.
"""

import pytest
import torch
from ranks import load_exercise, run_ranks

exercise = load_exercise("ex7_fix_this_script")

WORLD_SIZE = 2


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(
        exercise.main,
        WORLD_SIZE,
        "exercise 7's script",
        hang="a collective that not every rank calls",
        timeout_s=5,
        ddp=True,
    )


def test_the_script_completes(ranks):
    assert len(ranks) == WORLD_SIZE


def test_every_epoch_visits_the_samples_in_a_new_order(ranks):
    for epoch in range(exercise.EPOCHS):
        visited = sorted(i for report in ranks for i in report["orders"][epoch])
        assert set(visited) == set(range(exercise.SAMPLES)), (
            f"epoch {epoch} never visited samples "
            f"{sorted(set(range(exercise.SAMPLES)) - set(visited))}"
        )
    for rank, report in enumerate(ranks):
        first, second = report["orders"][:2]
        assert first != second, (
            f"rank {rank} visited the samples in the same order in epochs 0 and 1: {first}"
        )


def test_the_evaluation_counts_each_sample_once(ranks):
    x, y = exercise.make_dataset().tensors[1:]
    model = torch.nn.Linear(3, 1)
    with torch.no_grad():
        for param, value in zip(model.parameters(), ranks[0]["weights"].split([3, 1]), strict=True):
            param.copy_(value.view_as(param))
        loss = torch.nn.functional.mse_loss(model(x), y, reduction="sum").item()
    for rank, report in enumerate(ranks):
        loss_sum, seen = report["totals"].tolist()
        assert seen == exercise.SAMPLES, (
            f"rank {rank}'s evaluation counted {seen:g} samples; the dataset has {exercise.SAMPLES}"
        )
        assert loss_sum == pytest.approx(loss, rel=1e-5), (
            f"rank {rank}'s evaluation summed a loss of {loss_sum:.6g}; over the dataset, "
            f"once each, it is {loss:.6g}"
        )
