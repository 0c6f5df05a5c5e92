"""Exercise 2: naive data parallelism.

Write the two calls that turn a training loop into a data-parallel one:

    broadcast_parameters(model)   once, before training: every rank starts from rank 0's
                                  parameters, whatever seed it built its model from
    average_gradients(model)      after each backward: every parameter's gradient becomes the
                                  mean of that gradient over the ranks

Grade it with

    python -m pytest test_ex2_naive_data_parallel.py

The test trains 3 steps on 2 ranks that start from different seeds, each on its half of every
batch, and compares the result with one process training on the whole batch.
"""

import torch.distributed as dist  # noqa: F401  (your code will use it)


def broadcast_parameters(model):
    """Overwrite every rank's parameters with rank 0's."""
    # TODO: one dist.broadcast per parameter. Broadcast into param.data (or under
    #       torch.no_grad()): autograd must not record the overwrite.
    raise NotImplementedError("exercise 2: write broadcast_parameters with dist.broadcast")


def average_gradients(model):
    """Replace every parameter's gradient by its mean over the ranks."""
    # TODO: dist.all_reduce sums; divide by the world size to get the mean. A parameter
    #       that took no part in the loss has grad None: skip it.
    raise NotImplementedError("exercise 2: write average_gradients with dist.all_reduce")
