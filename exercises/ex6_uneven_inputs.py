"""Exercise 6: uneven inputs.

hanging_train below is a DDP training loop as people first write it. Give one rank fewer
batches than the others and it hangs: that rank leaves the loop, and the others wait forever
in their next backward for an all_reduce it will never join.

Write train(model, batches, lr): the same loop, made to finish whatever the batch counts,
with every rank ending on the same parameters. Either of two fixes is right:
- torch.distributed.algorithms.join.Join: ranks that run out of batches shadow the others'
  all_reduces until every rank is done (each extra step then averages over all the ranks,
  the finished ones counting as zero gradients);
- equal work: every rank trains on as many batches as the rank with the fewest (agree on
  that number with one all_reduce before the loop).

Grade it with

    python -m pytest test_ex6_uneven_inputs.py
"""

import torch


def hanging_train(model, batches, lr):
    """Plain DDP training on this rank's (x, y) batches. Hangs on uneven counts."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model


def train(model, batches, lr):
    """hanging_train, made to finish when ranks have different numbers of batches."""
    # TODO: start from hanging_train's loop, and wrap it in `with Join([model]):`, or cut
    #       `batches` to the smallest count over the ranks first.
    raise NotImplementedError("exercise 6: make the loop finish on uneven inputs")
