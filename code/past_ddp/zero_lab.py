"""ZeRO-1 beside DDP: who keeps Adam's state, what the step sends, and one FSDP2 step.

Run it (gloo on CPU; each world size is one spawn of that many ranks, which meet through a
file:// store in a fresh temp directory):

    python code/past_ddp/zero_lab.py
    python code/past_ddp/zero_lab.py --world-sizes 2 --steps 3 --json zero.json

For each world size p, every rank builds the same small model (four Linear layers of unequal
sizes, so its eight parameter tensors differ in length) and trains two copies of it on its own
batches, side by side in one process:

1. DistributedDataParallel with torch.optim.Adam, which keeps both moments of every parameter
   on every rank;
2. DistributedDataParallel with ZeroRedundancyOptimizer(optimizer_class=torch.optim.Adam),
   which hands each parameter tensor to one rank: only that rank runs Adam on it and keeps its
   moments, then broadcasts the updated tensor to the others (ZeRO stage 1).

It measures, per rank: the bytes of the tensors in each optimizer's state (for ZeRO, in the
local Adam it wraps, `zero.optim`), which parameter tensors the rank owns, the largest
difference between the two copies after --steps steps, and the collectives each step() calls.
ZeRO assigns whole tensors, largest first, each to the rank with the fewest elements so far,
so the shares are as even as the tensor sizes allow, and no more.

Collectives are counted by wrapping torch.distributed's collective functions while step()
runs: ZeRO (and FSDP2) call them through the module, so every call is seen, on each release
the course supports. torch.profiler sees them too, but writes lines of its own to stderr.

Then the bridge to FSDP2: the same model with `fully_shard` on each Linear and on the whole,
one step beside DDP + Adam. Its parameters are DTensors split on dim 0 across the ranks; the
lab reports the bytes each rank stores and compares gradients and parameters with DDP's.

The --json file (one object):
  world_sizes, steps, batch, lr
  parameters   [{name, shape, elements, bytes}] in model.parameters() order
  runs         [{world_size, ranks: [one per rank]}], each rank:
    rank, owned (parameter names), owned_elements, param_bytes, grad_bytes
    state            {adam, zero}: {exp_avg, exp_avg_sq, step, total} in bytes
    max_abs_diff     largest |ZeRO-1 parameter - DDP + Adam parameter| after the steps
    tolerance        one float32 rounding at the largest weight (eps * max |p|)
    collectives      {adam, zero}: one {name: {calls, bytes}} per step, inside step()
    fsdp             {supported: false, reason}, or {supported: true, placements,
                     local_shapes, param_bytes, grad_bytes, state, grad_max_abs_diff,
                     grad_tolerance, param_max_abs_diff, adam_eps, beyond_adam_slope,
                     collectives} for one step under fully_shard
  env          provenance.machine_facts()
"""

import argparse
import contextlib
import functools
import json
import os
import pathlib
import sys

# code/, one folder up, holds what every family of labs shares: pace, provenance, lab_cli,
# the launcher. Put it on the path, so this script runs from any folder.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from launcher import file_store, spawn_ranks  # noqa: E402  (code/; torch-free until it spawns)

LAYERS = [(64, 256), (256, 128), (128, 32), (32, 10)]  # (in, out): tensors of unequal sizes

# Every collective function torch.distributed may offer; a release without one is skipped.
COLLECTIVES = (
    "broadcast",
    "all_reduce",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_coalesced",
    "all_reduce_coalesced",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
)


# ---------------------------------------------------------------------------------------------
# Settings: checked before torch is imported
# ---------------------------------------------------------------------------------------------
def world_sizes(text):
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or not all(2 <= p <= 8 for p in sizes):
        raise argparse.ArgumentTypeError("each world size must be between 2 and 8")
    return sizes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--world-sizes", type=world_sizes, default=[2, 4], help="ranks per run, e.g. 2,4"
    )
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps per run")
    parser.add_argument("--batch", type=int, default=16, help="examples per rank per step")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam's learning rate")
    parser.add_argument("--timeout", type=float, default=30.0, help="process-group timeout, s")
    parser.add_argument("--json", metavar="PATH", help="write every measured figure here")
    args = parser.parse_args(argv)
    for name in ("steps", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.lr <= 0:
        parser.error("--lr must be positive")
    return args


# ---------------------------------------------------------------------------------------------
# Measuring helpers
# ---------------------------------------------------------------------------------------------
def build_model():
    import torch.nn as nn

    blocks = []
    for fan_in, fan_out in LAYERS:
        blocks += [nn.Linear(fan_in, fan_out), nn.Tanh()]
    return nn.Sequential(*blocks[:-1])  # no Tanh after the last layer


def local_bytes(tensor):
    """Bytes this rank stores for `tensor`: a DTensor's local shard, else the whole tensor."""
    return tensor.to_local().nbytes if hasattr(tensor, "to_local") else tensor.nbytes


def state_bytes(optimizer):
    """Bytes of every tensor in optimizer.state, by key (exp_avg, exp_avg_sq, step), and total."""
    import torch

    by_key = {}
    for per_param in optimizer.state.values():
        for key, value in per_param.items():
            if torch.is_tensor(value):
                by_key[key] = by_key.get(key, 0) + local_bytes(value)
    return {**dict(sorted(by_key.items())), "total": sum(by_key.values())}


def payload_bytes(args, kwargs):
    """A collective's size: its largest tensor argument (a list of tensors counts as one)."""
    import torch

    sizes = [0]
    for value in (*args, *kwargs.values()):
        if torch.is_tensor(value):
            sizes.append(value.nbytes)
        elif isinstance(value, list | tuple) and value and all(map(torch.is_tensor, value)):
            sizes.append(sum(t.nbytes for t in value))
    return max(sizes)


@contextlib.contextmanager
def counting_collectives():
    """Count the calls (and tensor bytes) of torch.distributed's collectives while inside.

    Only outermost calls count: a collective that calls another through the module is one call.
    The functions are put back in `finally`, whatever happens inside.
    """
    import torch.distributed as dist

    counts, depth = {}, [0]
    originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}

    def wrap(name, function):
        @functools.wraps(function)
        def counted(*args, **kwargs):
            if depth[0] == 0:
                entry = counts.setdefault(name, {"calls": 0, "bytes": 0})
                entry["calls"] += 1
                entry["bytes"] += payload_bytes(args, kwargs)
            depth[0] += 1
            try:
                return function(*args, **kwargs)
            finally:
                depth[0] -= 1

        return counted

    try:
        for name, function in originals.items():
            setattr(dist, name, wrap(name, function))
        yield counts
    finally:
        for name, function in originals.items():
            setattr(dist, name, function)


def batches(rank, steps, batch):
    """This rank's own data: `steps` (x, y) pairs from a generator seeded by the rank."""
    import torch

    generator = torch.Generator().manual_seed(1 + rank)
    fan_in, fan_out = LAYERS[0][0], LAYERS[-1][1]
    return [
        (
            torch.randn(batch, fan_in, generator=generator),
            torch.randn(batch, fan_out, generator=generator),
        )
        for _ in range(steps)
    ]


def train_step(model, optimizer, x, y):
    """Forward, backward (DDP all-reduces), then step() with its collectives counted."""
    import torch.nn.functional as F

    optimizer.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()
    with counting_collectives() as counts:
        optimizer.step()
    return counts


def largest_difference(params_a, params_b):
    """max |a - b| over every element of two equally shaped parameter lists."""
    return max(
        (a.detach() - b.detach()).abs().max().item()
        for a, b in zip(params_a, params_b, strict=True)
    )


def rounding_tolerance(params):
    """One float32 rounding step at the largest magnitude: finfo.eps * max |p|."""
    import torch

    largest = max(p.detach().abs().max().item() for p in params)
    return torch.finfo(torch.float32).eps * largest


# ---------------------------------------------------------------------------------------------
# What each rank does
# ---------------------------------------------------------------------------------------------
def zero_beside_adam(rank, args, data):
    """Train DDP + Adam and DDP + ZeRO-1 Adam from the same start; measure both."""
    import copy

    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)  # every rank builds the same start (DDP would broadcast it anyway)
    model = build_model()
    zero_model = copy.deepcopy(model)
    names = {id(p): name for name, p in zero_model.named_parameters()}
    ddp, zero_ddp = DDP(model), DDP(zero_model)
    adam = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    zero = ZeroRedundancyOptimizer(
        zero_ddp.parameters(), optimizer_class=torch.optim.Adam, lr=args.lr
    )
    collectives = {"adam": [], "zero": []}
    for x, y in data:
        collectives["adam"].append(train_step(ddp, adam, x, y))
        collectives["zero"].append(train_step(zero_ddp, zero, x, y))
    # What this rank owns: the parameters of the local Adam that ZeRO wraps.
    owned = [p for group in zero.optim.param_groups for p in group["params"]]
    return {
        "rank": rank,
        "owned": [names[id(p)] for p in owned],
        "owned_elements": sum(p.numel() for p in owned),
        "param_bytes": sum(p.nbytes for p in model.parameters()),
        "grad_bytes": sum(p.grad.nbytes for p in model.parameters()),
        "state": {"adam": state_bytes(adam), "zero": state_bytes(zero.optim)},
        "max_abs_diff": largest_difference(model.parameters(), zero_model.parameters()),
        "tolerance": rounding_tolerance(model.parameters()),
        "collectives": collectives,
    }


def fsdp_step(args, data, world_size):
    """One training step under FSDP2's fully_shard beside DDP + Adam, or why it cannot run."""
    import copy

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    except ImportError as error:
        return {"supported": False, "reason": f"{type(error).__name__}: {error}"}

    torch.manual_seed(0)
    sharded = build_model()
    reference = copy.deepcopy(sharded)
    mesh = init_device_mesh("cpu", (world_size,))
    for layer in sharded:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)  # one all-gather unit per layer
    fully_shard(sharded, mesh=mesh)
    ddp = DDP(reference)
    fsdp_adam = torch.optim.Adam(sharded.parameters(), lr=args.lr)
    adam = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    x, y = data[0]
    with counting_collectives() as counts:
        F.mse_loss(sharded(x), y).backward()
        fsdp_adam.step()
    F.mse_loss(ddp(x), y).backward()
    adam.step()
    mine = list(sharded.parameters())
    # full_tensor() all-gathers a DTensor: every rank calls it, in the same order.
    grads = [p.grad.full_tensor() for p in mine]
    params = [p.full_tensor() for p in mine]
    ref_grads = [p.grad for p in reference.parameters()]
    eps, adam_eps = torch.finfo(torch.float32).eps, fsdp_adam.param_groups[0]["eps"]
    # Adam's first step is lr * g / (|g| + adam_eps); its slope is at most lr / adam_eps (at
    # g = 0), so a gradient that moved by d may move the parameter by lr * d / adam_eps.
    beyond = max(
        ((p - q).abs() - args.lr * (g - h).abs() / adam_eps - eps * (q.abs() + args.lr)).max()
        for p, q, g, h in zip(params, reference.parameters(), grads, ref_grads, strict=True)
    ).item()
    return {
        "supported": True,
        "placements": sorted({str(p.placements) for p in mine}),
        "local_shapes": [list(p.to_local().shape) for p in mine],
        "param_bytes": sum(local_bytes(p) for p in mine),
        "grad_bytes": sum(local_bytes(p.grad) for p in mine),
        "state": state_bytes(fsdp_adam),
        "grad_max_abs_diff": largest_difference(grads, ref_grads),
        # p gradients summed in another order: up to p - 1 roundings at the largest gradient
        "grad_tolerance": (world_size - 1) * rounding_tolerance(ref_grads),
        "param_max_abs_diff": largest_difference(params, reference.parameters()),
        "adam_eps": adam_eps,
        "beyond_adam_slope": beyond,
        "collectives": counts,
    }


def rank_worker(rank, world_size, run_dir, args):
    import datetime
    import gc

    import torch

    # torch._dynamo comes before the process group: first imported after it (as the
    # first DDP or torch.optim use does), it keeps the group alive past
    # destroy_process_group, and the exit can abort (chapter 4).
    import torch._dynamo  # noqa: F401
    import torch.distributed as dist

    torch.set_num_threads(1)  # up to four ranks on a small machine: one compute thread each
    dist.init_process_group(
        "gloo",
        init_method=file_store(run_dir),
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=args.timeout),
    )
    try:
        data = batches(rank, args.steps, args.batch)
        measured = zero_beside_adam(rank, args, data)
        measured["fsdp"] = fsdp_step(args, data, world_size)
        with open(os.path.join(run_dir, f"rank{rank}.json"), "w") as file:
            json.dump(measured, file)
    finally:
        gc.collect()  # the DDP wrappers are out of scope: let them go before the group does
        dist.destroy_process_group()


def run_world(world_size, args):
    """Spawn `world_size` ranks; return what each measured, in rank order."""
    with spawn_ranks(rank_worker, world_size, (args,), f"zero-{world_size}-") as run_dir:
        ranks = [
            json.loads(pathlib.Path(run_dir, f"rank{r}.json").read_text())
            for r in range(world_size)
        ]
    return {"world_size": world_size, "ranks": ranks}


# ---------------------------------------------------------------------------------------------
# Claims: what must hold, or the script exits with the first that fails
# ---------------------------------------------------------------------------------------------
def claim_failures(result):
    """Every claim of the report that the measurements contradict, as one line each."""
    names = [p["name"] for p in result["parameters"]]
    failures = []
    for run in result["runs"]:
        p, ranks = run["world_size"], run["ranks"]
        unsharded = ranks[0]["state"]["adam"]["total"]
        if any(r["state"]["adam"]["total"] != unsharded for r in ranks):
            failures.append(f"{p} ranks: plain Adam's state differs between ranks")
        if any(r["state"]["zero"]["total"] >= unsharded for r in ranks):
            failures.append(f"{p} ranks: a ZeRO rank holds as much state as plain Adam")
        if sum(r["state"]["zero"]["total"] for r in ranks) != unsharded:
            failures.append(f"{p} ranks: the ZeRO shards' state does not add up to Adam's")
        if sorted(name for r in ranks for name in r["owned"]) != sorted(names):
            failures.append(f"{p} ranks: ZeRO's owners do not cover each parameter once")
        for r in ranks:
            if r["max_abs_diff"] > r["tolerance"]:
                failures.append(
                    f"{p} ranks: rank {r['rank']}'s ZeRO parameters differ from DDP + Adam's "
                    f"by {r['max_abs_diff']:.1e} (tolerance {r['tolerance']:.1e})"
                )
            if any(step for step in r["collectives"]["adam"]):
                failures.append(f"{p} ranks: plain Adam's step called a collective")
            if not all(step for step in r["collectives"]["zero"]):
                failures.append(f"{p} ranks: a ZeRO step called no collective")
            fsdp = r["fsdp"]
            if fsdp["supported"] and fsdp["grad_max_abs_diff"] > fsdp["grad_tolerance"]:
                failures.append(f"{p} ranks: FSDP2's gradients differ from DDP's")
            if fsdp["supported"] and fsdp["beyond_adam_slope"] > 0:
                failures.append(f"{p} ranks: FSDP2's parameters differ beyond what Adam allows")
    return failures


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def kib(nbytes):
    return f"{nbytes / 1024:.1f} KiB"


def calls(counts):
    """'broadcast x8 (210.9 KiB)', or 'none'."""
    parts = [f"{name} x{c['calls']} ({kib(c['bytes'])})" for name, c in sorted(counts.items())]
    return ", ".join(parts) or "none"


def print_model(args, result):
    params = result["parameters"]
    elements = sum(p["elements"] for p in params)
    print("== model ==")
    print(
        f"{len(LAYERS)} Linear layers, Tanh between: {elements:,} float32 parameters "
        f"in {len(params)} tensors, {kib(sum(p['bytes'] for p in params))}"
    )
    for weight, bias in zip(params[::2], params[1::2], strict=True):
        fan_out, fan_in = weight["shape"]
        print(
            f"  {weight['name']:<9} {weight['elements']:>7,}  {bias['name']:<7} "
            f"{bias['elements']:>4,}   Linear({fan_in}, {fan_out})"
        )
    sizes = " and ".join(map(str, args.world_sizes))
    print(
        f"each rank: its own {args.batch} examples a step, {args.steps} Adam steps "
        f"at lr {args.lr:g}; gloo, {sizes} ranks"
    )


def per_parameter(rank, state, elements):
    """'4.00 + 4.00 + 4.86 = 12.86': weights + gradients + optimizer state, bytes/parameter."""
    parts = [rank["param_bytes"], rank["grad_bytes"], state]
    return " + ".join(f"{b / elements:.2f}" for b in parts) + f" = {sum(parts) / elements:.2f}"


def print_state(result):
    elements = sum(p["elements"] for p in result["parameters"])
    print("== state ==")
    adam = result["runs"][0]["ranks"][0]["state"]["adam"]
    print(
        f"plain Adam keeps on every rank: exp_avg {kib(adam['exp_avg'])} + exp_avg_sq "
        f"{kib(adam['exp_avg_sq'])}"
    )
    tensors = len(result["parameters"])
    print(f"  + step {adam['step']} B (a {adam['step'] // tensors}-byte counter per tensor)")
    for run in result["runs"]:
        p, ranks = run["world_size"], run["ranks"]
        print(f"{p} ranks     tensors  elements  plain Adam     ZeRO-1  ZeRO/Adam")
        for r in ranks:
            zero, full = r["state"]["zero"]["total"], r["state"]["adam"]["total"]
            print(
                f"  {'rank ' + str(r['rank']):<11}{len(r['owned']):>7} {r['owned_elements']:>9,} "
                f"{kib(full):>11} {kib(zero):>10} {zero / full:>10.1%}"
            )
        total = sum(r["state"]["zero"]["total"] for r in ranks)
        print(
            f"  {'all ranks':<11}{sum(len(r['owned']) for r in ranks):>7} "
            f"{sum(r['owned_elements'] for r in ranks):>9,} {'':>11} {kib(total):>10}"
        )
        print(f"  ZeRO-1's state on all ranks {total:,} B; plain Adam's {adam['total']:,} B")
        fullest = max(ranks, key=lambda r: r["state"]["zero"]["total"])
        print("  bytes per parameter on a rank, weights + grads + optimizer state:")
        rows = [
            ("plain Adam", fullest["state"]["adam"]["total"]),
            (f"ZeRO-1, rank {fullest['rank']}", fullest["state"]["zero"]["total"]),
            (f"even 1/{p} shards", fullest["state"]["adam"]["total"] / p),
        ]
        for label, state in rows:
            print(f"    {label:<18} {per_parameter(fullest, state, elements)}")


def print_equal(result):
    print("== equal ==")
    for run in result["runs"]:
        worst = max(run["ranks"], key=lambda r: r["max_abs_diff"])
        print(
            f"{run['world_size']} ranks, {result['steps']} steps: largest |ZeRO-1 - DDP + Adam| "
            f"{worst['max_abs_diff']:.1e} over every rank and parameter"
        )
        print(f"  (allowed: one float32 rounding at the largest weight, {worst['tolerance']:.1e})")


def print_collectives(result):
    print("== collectives ==")
    print("called inside optimizer.step(), per rank and step; bytes: the full-size tensor")
    for run in result["runs"]:
        for method, label in (("adam", "plain Adam"), ("zero", "ZeRO-1")):
            seen = {calls(step) for r in run["ranks"] for step in r["collectives"][method]}
            same = "every rank, every step" if len(seen) == 1 else "differs by rank or step"
            print(
                f"{run['world_size']} ranks, {label + ':':<11} {' | '.join(sorted(seen))} ({same})"
            )
    every = sum(p["bytes"] for p in result["parameters"])
    sent = [s for run in result["runs"] for r in run["ranks"] for s in r["collectives"]["zero"]]
    if all(s.get("broadcast", {}).get("bytes") == every for s in sent):
        print(
            f"ZeRO-1's broadcasts carry every parameter tensor once, from its owner: {kib(every)},"
        )
        print("the whole model, what an all-gather of the ranks' shards would deliver")


def print_fsdp(result):
    print("== fsdp ==")
    names = [p["name"] for p in result["parameters"]]
    elements = sum(p["elements"] for p in result["parameters"])
    for run in result["runs"]:
        p, ranks = run["world_size"], run["ranks"]
        first = ranks[0]["fsdp"]
        if not first["supported"]:
            print(f"{p} ranks: no FSDP2 fully_shard in this release ({first['reason']})")
            continue
        print(f"{p} ranks, one step; parameters: DTensors placed {', '.join(first['placements'])}")
        r0 = ranks[0]
        plain = (r0["param_bytes"] + r0["grad_bytes"] + r0["state"]["adam"]["total"]) / elements
        print(f"  stored on each rank, weights + grads + Adam state (DDP + Adam: {plain:.2f} B):")
        for r in ranks:
            fsdp = r["fsdp"]
            parts = [fsdp["param_bytes"], fsdp["grad_bytes"], fsdp["state"]["total"]]
            print(
                f"    rank {r['rank']}: {' + '.join(f'{b / 1024:.1f}' for b in parts)} KiB"
                f" = {sum(parts) / elements:.2f} B per parameter"
            )
        print(f"    1/{p} of DDP + Adam's {plain:.2f} B would be {plain / p:.2f} B per parameter")
        split = " + ".join(str(r["fsdp"]["local_shapes"][-1][0]) for r in ranks)
        rows = result["parameters"][-1]["shape"][0]
        print(f"  dim 0 cut in {p}: {names[-1]}'s {rows} rows held as {split}")
        grads = max(r["fsdp"]["grad_max_abs_diff"] for r in ranks)
        params = max(r["fsdp"]["param_max_abs_diff"] for r in ranks)
        print(
            f"  vs DDP + Adam: gradients {grads:.1e} (allowed {first['grad_tolerance']:.1e}), "
            f"parameters {params:.1e}"
        )
        if params > 0:
            slope = result["lr"] / first["adam_eps"]
            print(f"  Adam's first step, lr*g/(|g|+eps), has slope up to lr/eps = {slope:.0e}")
            print("  (at g = 0); no parameter differs by more than that slope times its")
            print("  gradient's difference")
        print("  collectives in forward, backward and step, per rank:")
        print(f"    {calls(first['collectives'])}")
        gathered = sum(c["bytes"] for n, c in first["collectives"].items() if "gather" in n)
        every = sum(t["bytes"] for t in result["parameters"])
        print(
            f"    all-gathers: {gathered / every:.2f} x the model (forward, then again in backward)"
        )


def main(argv=None):
    args = parse_args(argv)
    from provenance import machine_facts

    model = build_model()
    parameters = [
        {"name": name, "shape": list(p.shape), "elements": p.numel(), "bytes": p.nbytes}
        for name, p in model.named_parameters()
    ]
    result = {
        "world_sizes": args.world_sizes,
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "parameters": parameters,
        "runs": [run_world(p, args) for p in args.world_sizes],
        "env": machine_facts(),
    }
    print_model(args, result)
    print_state(result)
    print_equal(result)
    print_collectives(result)
    print_fsdp(result)
    if failures := claim_failures(result):
        sys.exit(failures[0])
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
