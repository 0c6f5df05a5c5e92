"""Exercise 6, solved with Join: finished ranks shadow the others' all_reduces."""

import torch
from torch.distributed.algorithms.join import Join


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
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    # A rank that runs out joins: until the last rank leaves the block, it answers each
    # of their gradient all_reduces with zeros, and at the end DDP hands every rank the
    # final parameters.
    with Join([model]):
        for x, y in batches:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return model
