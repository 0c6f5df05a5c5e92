"""Train a small regression model on one device: where chapter 1 starts.

    python code/first_job/train_single.py          # CPU, or the GPU if there is one
    python code/first_job/train_single.py --bf16   # forward pass under bf16 autocast

train_ddp.py is this script as a DDP job: `diff code/first_job/train_single.py
code/first_job/train_ddp.py` shows every line that takes.
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

# ------------------------------------------------------------------------------
# Settings
# ------------------------------------------------------------------------------
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=64, help="examples per step")
parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
parser.add_argument("--bf16", action="store_true", help="autocast the forward pass")
parser.add_argument(
    "--checkpoint",
    default="first_job.pt",
    help="where to save the trained weights (default: first_job.pt in the current folder)",
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


# ------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------
def train(device):
    torch.manual_seed(0)
    model = make_model().to(device)

    dataset = make_dataset()
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
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
        mean = loss_sum.item() / seen
        print(f"epoch {epoch}: mean loss {mean:.4f} over {seen} examples")

    torch.save(model.state_dict(), args.checkpoint)
    # map_location loads onto this process's device, whoever saved the file.
    restored = make_model().to(device)
    restored.load_state_dict(torch.load(args.checkpoint, map_location=device))
    print(f"saved and reloaded {args.checkpoint}")


def main():
    train(torch.device("cuda" if torch.cuda.is_available() else "cpu"))


if __name__ == "__main__":
    main()
