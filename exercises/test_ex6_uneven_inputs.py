"""Exercise 6's tests: the fixed loop finishes on uneven inputs, with the right parameters.

Rank 0 has 4 batches and rank 1 has 2. The learner's train runs on both ranks under a short
timeout; every rank must finish, agree on the parameters exactly, and hold what one of the
two right fixes gives, computed here in one process:
- Join: steps 0-1 average both ranks' gradients; steps 2-3 use rank 0's alone, divided by
  the 2 ranks (the finished rank counts as zero);
- equal work: steps 0-1 only.
"""

import pytest
import torch
from ranks import RankFailed, load_exercise, run_ranks

exercise = load_exercise("ex6_uneven_inputs")

WORLD_SIZE, LR, TIMEOUT_S = 2, 0.1, 5
BATCHES = {0: 4, 1: 2}  # batches per rank


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)
    ).double()


def batches(rank):
    generator = torch.Generator().manual_seed(rank)
    xs = torch.randn(BATCHES[rank], 5, 3, generator=generator, dtype=torch.float64)
    return [(x, x.sum(dim=1, keepdim=True).tanh()) for x in xs]


def flat(model):
    return torch.cat([param.detach().flatten() for param in model.parameters()])


def ddp_worker(train):
    def worker(rank, world_size):
        model = torch.nn.parallel.DistributedDataParallel(make_model())
        params = flat(train(model, batches(rank), LR).module)
        del model  # DDP goes before its process group does
        return params

    return worker


def learners_worker(rank, world_size):
    return ddp_worker(exercise.train)(rank, world_size)


def hanging_worker(rank, world_size):
    return ddp_worker(exercise.hanging_train)(rank, world_size)


def reference(steps, shadowed):
    """SGD where step t averages the gradients of the ranks that have a batch t.

    shadowed: divide by every rank (Join), or only by the ranks that have the batch.
    """
    model, data = make_model(), {rank: batches(rank) for rank in BATCHES}
    for step in range(steps):
        model.zero_grad()
        active = [rank for rank in BATCHES if step < BATCHES[rank]]
        for rank in active:
            x, y = data[rank][step]
            torch.nn.functional.mse_loss(model(x), y).backward()
        divisor = WORLD_SIZE if shadowed else len(active)
        with torch.no_grad():
            for param in model.parameters():
                param -= LR * param.grad / divisor
    return flat(model)


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(
        learners_worker,
        WORLD_SIZE,
        "exercise 6's training loop",
        hang="a rank ran out of batches and left the others waiting",
        timeout_s=TIMEOUT_S,
        ddp=True,
    )


def test_every_rank_finishes_on_the_same_parameters(ranks):
    for rank, params in enumerate(ranks[1:], start=1):
        assert torch.equal(params, ranks[0]), (
            f"rank {rank} finished with parameters that differ from rank 0's by "
            f"{(params - ranks[0]).abs().max().item():.3g}"
        )


def test_parameters_are_those_of_join_or_of_equal_work(ranks):
    fixes = {
        "Join": reference(max(BATCHES.values()), shadowed=True),
        "equal work": reference(min(BATCHES.values()), shadowed=False),
    }
    distances = {name: (ranks[0] - params).abs().max().item() for name, params in fixes.items()}
    assert min(distances.values()) <= 1e-12, (
        "rank 0's final parameters match neither fix: they differ by "
        + " and ".join(f"{d:.3g} from {name}'s" for name, d in distances.items())
    )


def test_the_given_loop_really_hangs():
    with pytest.raises(RankFailed, match="exercise 6's training loop"):
        run_ranks(
            hanging_worker, WORLD_SIZE, "exercise 6's training loop", timeout_s=TIMEOUT_S, ddp=True
        )
