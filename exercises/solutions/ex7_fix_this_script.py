"""Exercise 7, solved: the script with its three bugs fixed (each marked "fixed:").

main(rank, world_size) runs on every rank, in a process group that already exists, and
returns what the tests read: the order each epoch visited, and the evaluation's totals.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset

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
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)  # fixed: else every epoch replays one permutation
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
    # fixed: DistributedSampler pads the ranks' shares to equal length by repeating
    # samples; a strided share covers every sample exactly once.
    share = Subset(dataset, range(rank, len(dataset), world_size))
    loss_sum, seen = 0.0, 0
    with torch.no_grad():
        for _index, x, y in DataLoader(share, batch_size=BATCH):
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
    dist.all_reduce(totals)  # fixed: every rank joins a collective, not rank 0 alone
    if rank == 0:
        print(f"mean loss {totals[0] / totals[1]:.4f} over {int(totals[1])} samples")
    weights = torch.cat([param.detach().flatten() for param in model.parameters()])
    return {"orders": orders, "totals": totals, "weights": weights}


if __name__ == "__main__":
    from ranks import run_ranks

    run_ranks(main, 2, "exercise 7's script", timeout_s=5, ddp=True)
