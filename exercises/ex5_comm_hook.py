"""Exercise 5: a communication hook.

A hook for torch's DDP that halves the bytes on the wire.

torch's DDP lets you replace the all_reduce it runs for each bucket:

    ddp.register_comm_hook(state=group, hook=bf16_all_reduce_hook)

DDP then calls hook(state, bucket) once per bucket during backward. Here `state` is the
process group to reduce over, as for torch's own hooks: DDP may run on a subgroup, and None
means the default group. bucket.buffer() is the
bucket's gradients, flat, in float32. The hook must return a torch.futures.Future whose value
is a float32 tensor of the same size: the mean of that buffer over the ranks. DDP copies it
back into the parameters' .grad.

Write bf16_all_reduce_hook so that the all_reduce moves bfloat16 (2 bytes an element instead
of 4) and DDP still gets float32 back. Grade it with

    python -m pytest test_ex5_comm_hook.py
"""

import torch  # noqa: F401  (your code will use them)
import torch.distributed as dist  # noqa: F401


def bf16_all_reduce_hook(state, bucket):
    """All-reduce bucket.buffer() in bfloat16; return a Future of the float32 mean."""
    # TODO: make a bfloat16 copy of the buffer, divided by the size of the group `state`
    #       (so the sum of the copies is the mean).
    # TODO: dist.all_reduce(copy, group=state, async_op=True).get_future() is a Future
    #       of [copy]; chain .then(fn) on it, where fn turns the reduced copy back into
    #       float32 (writing it into the original buffer is the cheapest way) and returns
    #       that.
    raise NotImplementedError("exercise 5: write the bf16 all_reduce hook")
