"""Exercise 3's tests: BucketedDataParallel against torch's DDP, its all_reduces, its overlap.

For each bucket cap, two ranks run two backward passes through the learner's wrapper and
through torch's DDP on the same model and data, and report the gradients, every all_reduce
the wrapper launched (when, and whether asynchronously), and when each gradient was ready.
"""

import time

import pytest
import torch
import torch.distributed as dist
from ranks import load_exercise, run_ranks

exercise = load_exercise("ex3_bucketed_ddp")

WORLD_SIZE, STEPS = 2, 2
CAPS = (1000, 3000)  # bytes: four buckets and two for the model below, by the rule


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16),  # float64: weight 1024 B, bias 128 B
        torch.nn.Tanh(),
        torch.nn.Linear(16, 16),  # 2048 B, 128 B
        torch.nn.Tanh(),
        torch.nn.Linear(16, 4),  # 512 B, 32 B
    ).double()


def expected_buckets(model, cap):
    """Bucket sizes in bytes by the rule: reverse order, close before passing the cap."""
    sizes = []
    for param in reversed(list(model.parameters())):
        nbytes = param.numel() * param.element_size()
        if sizes and sizes[-1] + nbytes <= cap:
            sizes[-1] += nbytes
        else:
            sizes.append(nbytes)
    return sizes


def batch(rank, step):
    generator = torch.Generator().manual_seed(100 * rank + step)
    x = torch.randn(6, 8, generator=generator, dtype=torch.float64)
    return x, x[:, :4].cos()


def flat_grads(model):
    return torch.cat([param.grad.flatten() for param in model.parameters()])


def backward(model, rank, step):
    model.zero_grad()
    x, y = batch(rank, step)
    torch.nn.functional.mse_loss(model(x), y).backward()


def traced_steps(rank, cap):
    """The learner's wrapper: gradients, all_reduce calls, and gradient-ready times per step."""
    module = make_model()
    ready = []  # registered before the wrapper's hooks, so these run first for each parameter
    for param in module.parameters():
        param.register_post_accumulate_grad_hook(lambda p: ready.append(time.perf_counter_ns()))
    model = exercise.BucketedDataParallel(module, bucket_cap_bytes=cap)
    all_reduce, calls = dist.all_reduce, []

    def traced(tensor, *args, **kwargs):
        calls.append({"ns": time.perf_counter_ns(), "async": kwargs.get("async_op", False)})
        return all_reduce(tensor, *args, **kwargs)

    steps = []
    for step in range(STEPS):
        ready.clear()
        calls.clear()
        dist.all_reduce = traced
        try:
            backward(model, rank, step)
        finally:
            dist.all_reduce = all_reduce
        steps.append({"grads": flat_grads(module), "calls": list(calls), "last_ready": ready[-1]})
    return steps


def torch_ddp_grads(rank):
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    grads = []
    for step in range(STEPS):
        backward(model, rank, step)
        grads.append(flat_grads(model.module))
    del model  # DDP goes before its process group does
    return grads


def rank_worker(rank, world_size):
    return {
        "mine": {cap: traced_steps(rank, cap) for cap in CAPS},
        "ddp": torch_ddp_grads(rank),
    }


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(rank_worker, WORLD_SIZE, "exercise 3's backward", ddp=True)


@pytest.mark.parametrize("cap", CAPS)
def test_gradients_equal_torch_ddps(ranks, cap):
    for rank, report in enumerate(ranks):
        for step, (mine, ddp) in enumerate(zip(report["mine"][cap], report["ddp"], strict=True)):
            difference = (mine["grads"] - ddp).abs().max().item()
            assert difference <= 1e-12, (
                f"with bucket_cap_bytes={cap}, rank {rank}'s gradient in step {step} differs "
                f"from torch DDP's by {difference:.3g}"
            )


@pytest.mark.parametrize("cap", CAPS)
def test_one_asynchronous_all_reduce_per_bucket(ranks, cap):
    buckets = expected_buckets(make_model(), cap)
    for rank, report in enumerate(ranks):
        for step, mine in enumerate(report["mine"][cap]):
            calls = mine["calls"]
            assert len(calls) == len(buckets), (
                f"with bucket_cap_bytes={cap}, rank {rank}'s backward in step {step} ran "
                f"{len(calls)} all_reduces; the cap makes {len(buckets)} buckets of "
                f"{buckets} bytes"
            )
            assert all(call["async"] for call in calls), (
                f"rank {rank} launched an all_reduce without async_op=True: it blocked backward"
            )


@pytest.mark.parametrize("cap", CAPS)
def test_first_all_reduce_starts_before_backward_finishes(ranks, cap):
    for rank, report in enumerate(ranks):
        for step, mine in enumerate(report["mine"][cap]):
            first = mine["calls"][0]["ns"] if mine["calls"] else None
            assert first is not None and first < mine["last_ready"], (
                f"with bucket_cap_bytes={cap}, rank {rank}'s first all_reduce in step {step} "
                "started after the last gradient was ready: launch each bucket from the hook "
                "that fills it"
            )
