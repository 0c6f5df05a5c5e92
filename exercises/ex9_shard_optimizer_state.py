"""Exercise 9: shard the optimizer state.

A minimal ZeRO-1. Under DDP every rank keeps the whole optimizer state: for Adam, two more
tensors the size of each parameter. Here each rank keeps the state of its own shard of the
parameters, about 1/world_size of them, steps that shard alone, and then sends the updated
parameters to the other ranks. Write

    owned_parameters(params, rank, world_size)
        the list of parameters whose state `rank` keeps. Every rank calls it, for itself and
        for the others, and must get the same answer. Every trainable parameter is in exactly
        one shard; a frozen one (requires_grad=False) is in none; `params` may list a tied
        weight once per layer that uses it, but it is one parameter. No shard may hold more
        elements than an even share plus the largest parameter.

    ShardedOptimizer(params, optimizer_class, **defaults)
        builds optimizer_class(its rank's shard, **defaults) and keeps it as self.local: the
        only optimizer state on this rank. step() steps self.local, then broadcasts every
        trainable parameter from the rank that owns it. zero_grad() sets every parameter's
        .grad to None. It expects each .grad to hold the mean over the ranks already, as
        DDP leaves it after backward.

Training with it looks like training with any torch optimizer:

    model = DistributedDataParallel(net)
    optimizer = ShardedOptimizer(model.parameters(), torch.optim.Adam, lr=0.01)
    for x, y in batches:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()     # DDP leaves every .grad the mean over the ranks
        optimizer.step()                    # this rank's shard steps; then every rank agrees

Grade it with

    python -m pytest test_ex9_shard_optimizer_state.py

The test splits its model's parameters for 2 and for 3 ranks, then trains 5 Adam steps on 2
ranks that start from different seeds, each on its half of every batch, and compares the
result with one process running torch.optim.Adam on the whole batch. It reads each rank's
self.local.state to see which parameters have state there, and how many bytes. The model has
a frozen layer, a buffer, and a weight tied into two layers.
"""

import torch  # noqa: F401  (your code will use them)
import torch.distributed as dist  # noqa: F401


def owned_parameters(params, rank, world_size):
    """The parameters whose optimizer state rank `rank` keeps and steps."""
    # TODO: keep the trainable parameters, each once: compare with `is`, since two layers
    #       that share a weight hold the same tensor. Then split them into world_size
    #       shards by a rule that depends only on their order and sizes (param.numel()),
    #       never on their values, and return shard number `rank`.
    raise NotImplementedError("exercise 9: write owned_parameters")


class ShardedOptimizer:
    """A torch optimizer over this rank's shard; step() then shares the updated parameters."""

    def __init__(self, params, optimizer_class, **defaults):
        # TODO: keep list(params) (model.parameters() is a generator: it can be read once),
        #       note which rank owns each trainable parameter, and build self.local, the
        #       optimizer over this rank's shard (dist.get_rank(), dist.get_world_size()).
        raise NotImplementedError("exercise 9: write ShardedOptimizer")

    def zero_grad(self):
        # TODO: every parameter's .grad, not only the shard's.
        raise NotImplementedError("exercise 9: write ShardedOptimizer.zero_grad")

    def step(self):
        # TODO: step self.local; then, under torch.no_grad(), one dist.broadcast per
        #       trainable parameter, from its owner, in the same order on every rank.
        raise NotImplementedError("exercise 9: write ShardedOptimizer.step")
