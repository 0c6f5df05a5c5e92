"""Exercise 9's tests: a minimal ZeRO-1 against torch.optim.Adam, unsharded, on the whole batch.

First, in this process, owned_parameters splits the model's parameters for 2 and for 3 ranks,
listed the way a walk through its layers meets them: the tied weight twice, the frozen layer's
too. Then two ranks build the model from different seeds, wrap it in torch's DDP (which
broadcasts rank 0's weights and buffers, and averages the gradients), and train 5 Adam steps
with the learner's ShardedOptimizer, each on its half of every batch. One process, starting
from rank 0's seed, trains the same 5 steps with torch.optim.Adam on the whole batches.

The model has what real ones have: a frozen layer, a buffer, and one weight tied into two
layers. Its three 8x8 weights are most of its elements, so a split that sends them to one
rank is caught.
"""

import pytest
import torch
from ranks import load_exercise, run_ranks

exercise = load_exercise("ex9_shard_optimizer_state")

WORLD_SIZE, STEPS, BATCH, LR = 2, 5, 8, 0.01
ROWS = BATCH // WORLD_SIZE  # each rank's half of a batch
F64 = {"dtype": torch.float64}
# The sharded step is Adam's own arithmetic on the owner, so the ranks end bit-identical to DDP
# with plain Adam; the one-process reference differs only in how the gradient's mean is
# rounded (the ranks' halves averaged, or the whole batch at once). Adam scales each update by
# 1 / (sqrt(v) + eps), which carries a gradient's relative rounding into the update: measured,
# 1.1e-16 after 5 steps, on torch 2.13 to 2.15.
TOLERANCE = 1e-12


class Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Linear(4, 8, **F64).requires_grad_(False)  # frozen
        self.register_buffer("shift", torch.randn(8, **F64))  # a buffer, not a parameter
        self.encode = torch.nn.Linear(8, 8, **F64)  # weight 64 elements, bias 8
        self.middle = torch.nn.Linear(8, 8, **F64)
        self.late = torch.nn.Linear(8, 8, **F64)
        self.decode = torch.nn.Linear(8, 8, **F64)
        self.decode.weight = self.encode.weight  # tied: one parameter, used twice
        self.head = torch.nn.Linear(8, 1, **F64)

    def forward(self, x):
        hidden = torch.tanh(self.encode(self.embed(x) + self.shift))
        hidden = torch.tanh(self.late(torch.tanh(self.middle(hidden))))
        return self.head(torch.tanh(self.decode(hidden)))


def listed(model):
    """Every parameter as the layers hold them: the tied weight twice, frozen ones too."""
    return [param for _, param in model.named_parameters(remove_duplicate=False)]


def names(model):
    """{id(parameter): how a message names it}, for every parameter of the model."""
    found = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        found.setdefault(id(param), []).append(name)
    described = {}
    for key, (name, *others) in found.items():
        param = model.get_parameter(name)
        if not param.requires_grad:
            described[key] = f"{name} (frozen)"
        elif others:
            described[key] = f"{name} (tied to {', '.join(others)})"
        else:
            described[key] = name
    return described


def name_of(model, param):
    return names(model).get(id(param), f"a {tuple(param.shape)} tensor that is not the model's")


def batch(step):
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, 4, generator=generator, **F64)
    return x, x.sum(dim=1, keepdim=True).sin()


def rank_loss(model, step, rank):
    x, y = batch(step)
    rows = slice(rank * ROWS, (rank + 1) * ROWS)
    return torch.nn.functional.mse_loss(model(x[rows]), y[rows])


def full_batch_loss(model, step):
    # The mean over every row is the mean of the ranks' losses: their halves are equal.
    return sum(rank_loss(model, step, rank) for rank in range(WORLD_SIZE)) / WORLD_SIZE


def state_bytes(optimizer, model):
    """{name: bytes of the optimizer's state for that parameter}."""
    return {
        name_of(model, param): sum(
            value.numel() * value.element_size()
            for value in entry.values()
            if isinstance(value, torch.Tensor)
        )
        for param, entry in optimizer.state.items()
    }


def state(model):
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def rank_worker(rank, world_size):
    # Each rank builds other weights, and another buffer; DDP broadcasts rank 0's.
    model = torch.nn.parallel.DistributedDataParallel(Net(seed=rank))
    optimizer = exercise.ShardedOptimizer(model.parameters(), torch.optim.Adam, lr=LR)
    for step in range(STEPS):
        optimizer.zero_grad()
        rank_loss(model, step, rank).backward()  # DDP leaves each .grad the ranks' mean
        optimizer.step()
    net = model.module
    owned = exercise.owned_parameters(list(net.parameters()), rank, world_size)
    return {
        "owned": [name_of(net, param) for param in owned if param.requires_grad],
        "state_bytes": state_bytes(optimizer.local, net),
        "end": state(net),
    }


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(rank_worker, WORLD_SIZE, "exercise 9's training steps", ddp=True)


@pytest.fixture(scope="module")
def reference():
    model = Net(seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    for step in range(STEPS):
        optimizer.zero_grad()
        full_batch_loss(model, step).backward()
        optimizer.step()
    return {"state_bytes": state_bytes(optimizer, model), "end": state(model)}


@pytest.mark.parametrize("world_size", [2, 3])
def test_each_trainable_parameter_has_one_owner(world_size):
    model = Net(seed=0)
    owners = {}  # id(parameter): the ranks whose shard lists it, once per listing
    for rank in range(world_size):
        for param in exercise.owned_parameters(listed(model), rank, world_size):
            owners.setdefault(id(param), []).append(rank)
    for param in model.parameters():
        name, ranks = name_of(model, param), owners.get(id(param), [])
        if not param.requires_grad:
            assert not ranks, (
                f"with {world_size} ranks, rank {ranks[0]}'s shard holds {name}: a frozen "
                "parameter never steps, so it needs no owner (an owner would broadcast it "
                "every step, and count it in its share)"
            )
            continue
        assert ranks, f"with {world_size} ranks, no rank's shard holds {name}: nobody steps it"
        assert len(ranks) == 1, (
            f"with {world_size} ranks, {name} is in the shards {len(ranks)} times "
            f"({', '.join(f'rank {rank}' for rank in ranks)}), so it is stepped that often. A "
            "tied weight is one parameter, listed once per layer that uses it: keep it once"
        )


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_shards_are_even(world_size):
    model = Net(seed=0)
    trainable = [param for param in model.parameters() if param.requires_grad]
    total = sum(param.numel() for param in trainable)
    largest = max(param.numel() for param in trainable)
    # Giving each parameter to the rank that owns the fewest elements so far never passes
    # this: the last parameter a rank got came when it held at most an even share of the rest.
    limit = total / world_size + largest
    for rank in range(world_size):
        shard = exercise.owned_parameters(listed(model), rank, world_size)
        unique = {id(param): param for param in shard if param.requires_grad}
        elements = sum(param.numel() for param in unique.values())
        assert elements <= limit, (
            f"with {world_size} ranks, rank {rank}'s shard holds {elements} of the model's "
            f"{total} trainable elements: more than an even share ({total / world_size:.4g}) "
            f"plus the largest parameter ({largest}), so its state is far from 1/{world_size} "
            "of the whole. Give each parameter to the rank that owns the fewest elements so far"
        )


def test_each_rank_keeps_state_only_for_the_parameters_it_owns(ranks):
    owner = {name: rank for rank, report in enumerate(ranks) for name in report["owned"]}
    for rank, report in enumerate(ranks):
        for name in report["state_bytes"]:
            assert name in report["owned"], (
                f"after {STEPS} steps, rank {rank}'s optimizer keeps state for {name}, which "
                + (f"rank {owner[name]} owns" if name in owner else "no rank owns")
                + ": build the wrapped optimizer over this rank's shard alone"
            )
        for name in report["owned"]:
            assert name in report["state_bytes"], (
                f"after {STEPS} steps, rank {rank} owns {name} but its optimizer keeps no "
                "state for it: the shard's optimizer must step every parameter of the shard"
            )


def test_the_ranks_state_bytes_add_up_to_the_unsharded_optimizers(ranks, reference):
    unsharded = sum(reference["state_bytes"].values())
    held = [sum(report["state_bytes"].values()) for report in ranks]
    for rank, report in enumerate(ranks):
        shard = sum(reference["state_bytes"][name] for name in report["owned"])
        assert held[rank] == shard, (
            f"rank {rank} holds {held[rank]} B of Adam state; its shard's parameters hold "
            f"{shard} B of the unsharded optimizer's {unsharded} B"
        )
    assert sum(held) == unsharded, (
        f"the ranks hold {' + '.join(map(str, held))} = {sum(held)} B of Adam state; the "
        f"unsharded optimizer holds {unsharded} B"
    )


def test_replicas_are_bit_identical(ranks):
    for rank, report in enumerate(ranks[1:], start=1):
        for name, tensor in report["end"].items():
            mine = ranks[0]["end"][name]
            assert torch.equal(tensor, mine), (
                f"after {STEPS} steps, rank {rank}'s {name} differs from rank 0's by "
                f"{(tensor - mine).abs().max().item():.3g}: after its step, each shard's "
                "owner must broadcast the updated parameters to the other ranks"
            )


def test_training_matches_unsharded_adam_on_the_whole_batch(ranks, reference):
    for rank, report in enumerate(ranks):
        for name, expected in reference["end"].items():
            difference = (report["end"][name] - expected).abs().max().item()
            assert difference <= TOLERANCE, (
                f"after {STEPS} Adam steps, rank {rank}'s {name} differs from unsharded Adam "
                f"on the whole batch by {difference:.3g}. Two usual causes: a gradient left "
                "from the last step on a rank that does not own the parameter (DDP adds the "
                "new one to it and sends the sum to the mean), or a broadcast from a rank "
                "that is not the owner"
            )
