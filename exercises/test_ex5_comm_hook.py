"""Exercise 5's tests: the bf16 comm hook's accuracy, and the bytes it puts on the wire.

Two ranks run one backward through torch's DDP with the learner's hook, wrapped so that it
records each bucket's size and what the hook returns, while dist.all_reduce records every
tensor handed to it. Each rank also reports its own local float32 gradient, for the average.
Then each rank runs DDP on a process group of its own, one rank in it, with that group as
the hook's state: its gradient must stay its own.
"""

import pytest
import torch
import torch.distributed as dist
from ranks import load_exercise, run_ranks

exercise = load_exercise("ex5_comm_hook")

WORLD_SIZE = 2
BF16_UNIT = 2.0**-8  # bfloat16 keeps 8 significant bits: one rounding moves a value this much


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))


def backward(model, rank):
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(16, 16, generator=generator)
    torch.nn.functional.mse_loss(model(x), x[:, :8].cos()).backward()
    return torch.cat([param.grad.flatten() for param in model.parameters()])


def rank_worker(rank, world_size):
    record = {"bucket_bytes": [], "wire_bytes": [], "wire_dtypes": [], "returned_dtypes": []}

    def recording_hook(state, bucket):
        buffer = bucket.buffer()
        record["bucket_bytes"].append(buffer.numel() * buffer.element_size())

        def returned(future):
            record["returned_dtypes"].append(str(future.value().dtype))
            return future.value()

        return exercise.bf16_all_reduce_hook(state, bucket).then(returned)

    all_reduce = dist.all_reduce

    def counted(tensor, *args, **kwargs):
        record["wire_bytes"].append(tensor.numel() * tensor.element_size())
        record["wire_dtypes"].append(str(tensor.dtype))
        return all_reduce(tensor, *args, **kwargs)

    model = torch.nn.parallel.DistributedDataParallel(make_model())
    model.register_comm_hook(state=None, hook=recording_hook)
    dist.all_reduce = counted
    try:
        record["ddp"] = backward(model, rank)
    finally:
        dist.all_reduce = all_reduce
    del model  # DDP goes before its process group does
    record["local"] = backward(make_model(), rank)
    # Every rank joins the creation of every subgroup; each gets the one holding only itself.
    alone, _ = dist.new_subgroups(group_size=1)
    model = torch.nn.parallel.DistributedDataParallel(make_model(), process_group=alone)
    model.register_comm_hook(state=alone, hook=exercise.bf16_all_reduce_hook)
    record["alone"] = backward(model, rank)
    del model
    return record


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(rank_worker, WORLD_SIZE, "exercise 5's backward", ddp=True)


def test_result_is_within_bf16_rounding_of_the_float32_average(ranks):
    locals_ = torch.stack([report["local"] for report in ranks]).double()
    average = locals_.mean(dim=0)
    # Each share is rounded once to bfloat16 and each partial sum once more.
    allowed = WORLD_SIZE * BF16_UNIT * locals_.abs().mean(dim=0) + 1e-30
    for rank, report in enumerate(ranks):
        assert report["returned_dtypes"] and set(report["returned_dtypes"]) == {"torch.float32"}, (
            f"rank {rank}'s hook returned {report['returned_dtypes']}, not float32 tensors"
        )
        error = (report["ddp"].double() - average).abs()
        worst = (error / allowed).argmax().item()
        assert error[worst] <= allowed[worst], (
            f"rank {rank}'s gradient element {worst} is {report['ddp'][worst].item():.6g}; "
            f"the float32 average is {average[worst].item():.6g}, more than bfloat16 "
            f"rounding ({allowed[worst].item():.3g}) away"
        )


def test_bytes_on_the_wire_are_halved(ranks):
    for rank, report in enumerate(ranks):
        assert set(report["wire_dtypes"]) == {"torch.bfloat16"}, (
            f"rank {rank}'s hook all-reduced {sorted(set(report['wire_dtypes']))}, not bfloat16"
        )
        wire, buckets = sum(report["wire_bytes"]), sum(report["bucket_bytes"])
        assert 2 * wire == buckets, (
            f"rank {rank} put {wire} bytes on the wire for {buckets} bytes of float32 "
            f"gradients; bfloat16 makes it {buckets // 2}"
        )


def test_the_hook_reduces_over_the_group_it_is_given(ranks):
    for rank, report in enumerate(ranks):
        local = report["local"].double()
        allowed = BF16_UNIT * local.abs() + 1e-30  # one rounding to bfloat16, nothing added
        error = (report["alone"].double() - local).abs()
        worst = (error / allowed).argmax().item()
        assert error[worst] <= allowed[worst], (
            f"with DDP on a group holding rank {rank} alone, and that group as the hook's "
            f"state, rank {rank}'s gradient element {worst} is "
            f"{report['alone'][worst].item():.6g}, not its own {local[worst].item():.6g}: "
            "`state` is the process group to reduce over; pass group=state to all_reduce "
            "and divide by dist.get_world_size(state)"
        )
