"""Exercise 7: fix this script.

A short DDP job: train a linear model for two epochs on 11 samples, then evaluate it and
print the mean loss over the dataset. It carries three bugs from the failure gallery:

- it hangs at the end;
- every epoch visits the samples in the same order;
- its evaluation counts 12 samples, not 11.

Find and fix all three, changing as little as you can; the tests check what the script
does, not how you wrote the fix. Run it with two ranks, and grade it, with

    python ex7_fix_this_script.py
    python -m pytest test_ex7_fix_this_script.py

main(rank, world_size) runs on every rank, in a process group that already exists, and
returns what the tests read: the order each epoch visited, and the evaluation's totals.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SAMPLES, EPOCHS, BATCH, LR = 11, 2, 2, 0.1


def make_dataset():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 3, generator=generator)
    return TensorDataset(torch.arange(SAMPLES), x, x.sum(dim=1, keepdim=True))


def train(model, dataset, rank, world_size):
    """EPOCHS epochs of SGD; returns the sample indices each epoch visited, in order."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=0)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    orders = []
    for _epoch in range(EPOCHS):
        visited = []
        for index, x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            visited += index.tolist()
        orders.append(visited)
    return orders


def evaluate(model, dataset, rank, world_size):
    """This rank's share of the evaluation: (sum of squared errors, samples seen)."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    loss_sum, seen = 0.0, 0
    with torch.no_grad():
        for _index, x, y in DataLoader(dataset, batch_size=BATCH, sampler=sampler):
            loss_sum += (model(x) - y).square().sum().item()
            seen += len(x)
    return loss_sum, seen


def main(rank, world_size):
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(3, 1))
    dataset = make_dataset()
    orders = train(model, dataset, rank, world_size)
    loss_sum, seen = evaluate(model.module, dataset, rank, world_size)
    totals = torch.tensor([loss_sum, seen], dtype=torch.float64)
    if rank == 0:
        dist.all_reduce(totals)  # the sums over every rank
        print(f"mean loss {totals[0] / totals[1]:.4f} over {int(totals[1])} samples")
    weights = torch.cat([param.detach().flatten() for param in model.parameters()])
    return {"orders": orders, "totals": totals, "weights": weights}


if __name__ == "__main__":
    from ranks import run_ranks

    run_ranks(main, 2, "exercise 7's script", timeout_s=5, ddp=True)
