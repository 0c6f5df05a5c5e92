"""Exercise 2: naive data parallelism.

Write the two calls that turn a training loop into a data-parallel one:

    broadcast_parameters(model)   once, before training: every rank starts from rank 0's
                                  parameters (frozen ones too) and buffers, whatever seed
                                  it built its model from
    average_gradients(model)      after each backward: every trainable parameter's gradient
                                  becomes the mean of that gradient over the ranks

Grade it with

    python -m pytest test_ex2_naive_data_parallel.py

The test trains 5 steps on 2 ranks that start from different seeds, each on its half of every
batch, and compares the result with one process training on the whole batch. Its model has
what real ones have: a frozen layer, a buffer, a weight tied into two layers, and two heads,
one used by each rank's rows.
"""

import torch  # noqa: F401  (your code will use them)
import torch.distributed as dist  # noqa: F401


def broadcast_parameters(model):
    """Overwrite every rank's parameters, frozen ones too, and buffers with rank 0's."""
    # TODO: one dist.broadcast per parameter and per buffer (model.buffers()), under
    #       torch.no_grad(): autograd must not record the overwrite.
    raise NotImplementedError("exercise 2: write broadcast_parameters with dist.broadcast")


def average_gradients(model):
    """Replace every trainable parameter's gradient by its mean over the ranks."""
    # TODO: dist.all_reduce sums; divide by the world size to get the mean. Frozen
    #       parameters (requires_grad=False) take no part. A trainable parameter unused in
    #       this rank's loss has grad None, but another rank may have used it: every rank
    #       must join the same all_reduces in the same order, so give it zeros first.
    raise NotImplementedError("exercise 2: write average_gradients with dist.all_reduce")
