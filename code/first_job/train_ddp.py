"""Train a small regression model with DDP: chapter 1's first DDP job.

    torchrun --standalone --nproc_per_node=2 code/first_job/train_ddp.py   # CPU, gloo
    torchrun --standalone --nproc_per_node=8 code/first_job/train_ddp.py   # 8 GPUs, nccl
    torchrun --standalone --nproc_per_node=2 code/first_job/train_ddp.py --bf16

It is train_single.py as a DDP job: `diff code/first_job/train_single.py
code/first_job/train_ddp.py` shows every line that takes. Start it with torchrun,
which sets RANK, LOCAL_RANK and WORLD_SIZE for every process it starts.
"""

import argparse
import os

import torch

# torch._dynamo comes before the process group: first imported after it (as the
# first DDP or torch.optim use does), it keeps the group alive past
# destroy_process_group, and the exit can abort (chapter 4).
import torch._dynamo  # noqa: F401
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# ------------------------------------------------------------------------------
# Settings
# ------------------------------------------------------------------------------
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=64, help="per rank and step")
parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
parser.add_argument("--bf16", action="store_true", help="autocast the forward pass")
parser.add_argument(
    "--checkpoint",
    default=os.environ.get("CHECKPOINT", "first_job.pt"),
    help="where rank 0 saves the trained weights, on a file system every node reads "
    "(default: $CHECKPOINT, else first_job.pt in the current folder)",
)
args = parser.parse_args()


# ------------------------------------------------------------------------------
# Data and model
# ------------------------------------------------------------------------------
def make_dataset(size=2048, features=16):
    """A fixed regression task: y = X w + noise, the same on every run."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(size, features, generator=gen)
    w = torch.randn(features, 1, generator=gen)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(size, 1, generator=gen))


def make_model(features=16):
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 1))


def join_the_job():
    """Join the group torchrun set up; return this process's rank and device."""
    if torch.cuda.is_available():  # one GPU per process, picked by local rank
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), device


def save_atomically(state, path):
    """Write a temporary file beside `path`, force it to disk, then rename it: a reader on
    any node sees the old file or the whole new one, never half of it."""
    temporary = f"{path}.tmp"
    with open(temporary, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


# ------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------
def train(rank, device):
    world = dist.get_world_size()
    if rank == 0:
        print(f"{world} processes, backend {dist.get_backend()}, on {device.type}")

    torch.manual_seed(0)
    model = make_model().to(device)
    # DDP copies rank 0's weights to all ranks, then averages gradients in backward.
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    dataset = make_dataset()
    # Each rank: its own 1/world of the data. drop_last: where the data does not divide
    # evenly, leave out the few examples over, rather than repeat some to pad the shares.
    sampler = DistributedSampler(dataset, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # without it, every epoch repeats one shuffle
        loss_sum, seen = torch.zeros((), device=device), 0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            # Autocast covers the forward pass and the loss; never backward or step.
            with torch.autocast(device.type, torch.bfloat16, enabled=args.bf16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(x)
            seen += len(x)
        # Each rank saw its share only: sum every rank's total and count.
        totals = torch.stack([loss_sum, torch.tensor(float(seen), device=device)])
        dist.all_reduce(totals)
        mean, everyone = totals[0].item() / totals[1].item(), int(totals[1].item())
        if rank == 0:
            print(
                f"epoch {epoch}: mean loss {mean:.4f} over {everyone} examples "
                f"({seen} on each of {world} ranks)"
            )

    if rank == 0:  # one writer; .module drops DDP's "module." key prefix
        save_atomically(model.module.state_dict(), args.checkpoint)
    dist.barrier()  # nobody reads the file before rank 0 has written it
    # map_location loads onto this process's device, whoever saved the file.
    restored = make_model().to(device)
    restored.load_state_dict(torch.load(args.checkpoint, map_location=device))
    pairs = zip(restored.parameters(), model.parameters(), strict=True)
    same = all(torch.equal(a, b) for a, b in pairs)
    intact = torch.tensor(int(same), device=device)
    dist.all_reduce(intact)
    if rank == 0:
        print(f"saved {args.checkpoint}; {intact.item()} of {world} reloaded it")
    del model  # DDP goes before its process group does (chapter 4)


def main():
    rank, device = join_the_job()
    try:
        train(rank, device)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
