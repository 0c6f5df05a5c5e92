"""Exercise 4's tests: no_sync on the learner's wrapper, over k micro-batches per update.

Two ranks run two updates of K micro-batches each and report, per update, how many
all_reduces ran and the gradient the last backward left. The reference is the plain module,
in one process, accumulating every rank's micro-batches and dividing by the number of ranks.
"""

import pytest
import torch
import torch.distributed as dist
from ranks import load_exercise, run_ranks
from test_ex3_bucketed_ddp import expected_buckets

exercise = load_exercise("ex4_no_sync")

WORLD_SIZE, UPDATES, K, CAP = 2, 2, 3, 1000  # CAP makes 2 buckets for the model below


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)
    ).double()


def bucket_count(model, cap):
    """How many buckets exercise 3's rule makes for `model` (that rule has its home there)."""
    return len(expected_buckets(model, cap))


def micro_batch(rank, update, micro):
    generator = torch.Generator().manual_seed(1000 * rank + 10 * update + micro)
    x = torch.randn(4, 8, generator=generator, dtype=torch.float64)
    return x, x[:, :4].sin()


def backward(model, rank, update, micro):
    x, y = micro_batch(rank, update, micro)
    torch.nn.functional.mse_loss(model(x), y).backward()


def flat_grads(model):
    return torch.cat([param.grad.flatten() for param in model.parameters()])


def counting_all_reduces(run):
    """How many times dist.all_reduce was called while run() ran."""
    all_reduce, calls = dist.all_reduce, []

    def counted(*args, **kwargs):
        calls.append(1)
        return all_reduce(*args, **kwargs)

    dist.all_reduce = counted
    try:
        run()
    finally:
        dist.all_reduce = all_reduce
    return len(calls)


def rank_worker(rank, world_size):
    module = make_model()
    model = exercise.AccumulatingDataParallel(module, bucket_cap_bytes=CAP)
    updates = []
    for update in range(UPDATES):

        def accumulate(update=update):
            model.zero_grad()
            for micro in range(K - 1):
                with model.no_sync():
                    backward(model, rank, update, micro)
            backward(model, rank, update, K - 1)

        calls = counting_all_reduces(accumulate)
        updates.append({"all_reduces": calls, "grads": flat_grads(module)})
    return {"updates": updates, "after_an_error": syncs_after_an_error(model, rank)}


def syncs_after_an_error(model, rank):
    """All_reduces of a plain backward after an exception escaped from a no_sync block."""
    try:
        with model.no_sync():
            raise KeyError("an error inside no_sync")
    except KeyError:
        pass
    model.zero_grad()
    return counting_all_reduces(lambda: backward(model, rank, 0, 0))


def reference(update):
    model = make_model()
    for rank in range(WORLD_SIZE):
        for micro in range(K):
            backward(model, rank, update, micro)
    return flat_grads(model) / WORLD_SIZE


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(rank_worker, WORLD_SIZE, "exercise 4's accumulation")


def test_one_all_reduce_per_bucket_per_update(ranks):
    buckets = bucket_count(make_model(), CAP)
    for rank, report in enumerate(ranks):
        for update, result in enumerate(report["updates"]):
            assert result["all_reduces"] == buckets, (
                f"rank {rank} ran {result['all_reduces']} all_reduces in update {update} "
                f"over {K} micro-batches; with {buckets} buckets it should run {buckets}"
            )


def test_gradient_equals_the_plain_accumulated_one(ranks):
    for rank, report in enumerate(ranks):
        for update, result in enumerate(report["updates"]):
            difference = (result["grads"] - reference(update)).abs().max().item()
            assert difference <= 1e-12, (
                f"rank {rank}'s gradient after update {update} differs from the plain "
                f"accumulated gradient by {difference:.3g}"
            )


def test_an_error_inside_no_sync_leaves_sync_on(ranks):
    buckets = bucket_count(make_model(), CAP)
    for rank, report in enumerate(ranks):
        assert report["after_an_error"] == buckets, (
            f"after an exception left a no_sync block, rank {rank}'s next backward ran "
            f"{report['after_an_error']} all_reduces, not {buckets}: restore sync in `finally`"
        )
