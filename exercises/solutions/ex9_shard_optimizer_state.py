"""Exercise 9, solved: ZeRO-1, each rank keeping and stepping one shard of the optimizer state."""

import torch
import torch.distributed as dist


def owned_parameters(params, rank, world_size):
    """The parameters whose optimizer state rank `rank` keeps and steps.

    Every trainable parameter goes to exactly one rank; frozen ones to none. The rule is
    ZeRO's: largest first, each to the rank that owns the fewest elements so far.
    """
    trainable = []
    for param in params:
        if not param.requires_grad:
            continue  # frozen: it never steps, so no rank keeps state for it
        if any(param is seen for seen in trainable):
            continue  # a tied weight, listed again by another layer that uses it
        trainable.append(param)
    loads, mine = [0] * world_size, []
    # sorted() is stable: equal sizes keep the order of `params`, the same on every rank.
    for param in sorted(trainable, key=torch.Tensor.numel, reverse=True):
        owner = loads.index(min(loads))  # the lowest rank among the least loaded
        loads[owner] += param.numel()
        if owner == rank:
            mine.append(param)
    return mine


class ShardedOptimizer:
    """A torch optimizer over this rank's shard; step() then shares the updated parameters.

    It expects each .grad to be the mean over the ranks already, as DDP leaves it.
    """

    def __init__(self, params, optimizer_class, **defaults):
        self.params = list(params)  # a generator (model.parameters()) can be read once
        rank, world_size = dist.get_rank(), dist.get_world_size()
        # Every rank lists every shard, in the same order, so the broadcasts in step() pair up.
        self.owners = [
            (param, owner)
            for owner in range(world_size)
            for param in owned_parameters(self.params, owner, world_size)
        ]
        self.local = optimizer_class(owned_parameters(self.params, rank, world_size), **defaults)

    def zero_grad(self):
        """Every parameter's gradient to None, not only the shard's.

        DDP adds a new gradient to one that is already there, and every rank sends every
        gradient to the all_reduce: a stale one on any rank would reach the owner's mean.
        """
        for param in self.params:
            param.grad = None

    def step(self):
        self.local.step()  # only the shard: its state is the only state this rank has
        with torch.no_grad():  # autograd must not record the overwrite
            for param, owner in self.owners:
                dist.broadcast(param, src=owner)  # the owner's updated values, to everyone
