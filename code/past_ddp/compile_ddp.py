"""torch.compile with DDP: the graphs it compiles, the gradients it gives, what a compile costs.

Run it (two ranks over gloo, on CPU; --json PATH keeps every figure):

    python code/past_ddp/compile_ddp.py
    python code/past_ddp/compile_ddp.py --layers 8 --json compile.json
    python code/past_ddp/compile_ddp.py --skip-inductor      # the graphs and orders only: seconds

Two processes, spawned and joined through a file:// store in a fresh temp directory, each
build the same stack of Linear+tanh layers (a class of our own, as a reader's model would be)
and compute one batch's gradients in several ways. Every way runs two iterations (the first
compiles, and DDP rebuilds its buckets in the second), and the second one's gradients are
compared. It prints:

  == graphs ==    torch.compile(DDP(model)) at three bucket caps (1 MiB, 25 MiB passed
                  explicitly, and DDP's default, which is also 25 MiB but keeps a small first
                  bucket): how many graphs dynamo handed to the backend, and how many buckets
                  DDP reduced in one backward. The backend only counts the graphs and runs them
                  as traced.
  == orders ==    the same count for DDP(torch.compile(model)) and, without DDP, for
                  torch.compile(model); for each, the largest difference from eager DDP's
                  gradients and between the two ranks' gradients, and the first key of its
                  state_dict (what a checkpoint saved from it is keyed by).
  == inductor ==  torch.compile(DDP(model)) with the default backend, inductor: the first
                  iteration with an empty compile cache, then again (dynamo reset) with the
                  cache the first one filled, beside one eager step and `import torch`.

The --json file (one object): world_size, layers, width, batch, layer_bytes, import_torch_s,
graphs [{bucket_cap_mb (null: DDP's default), graphs, buckets}], orders [{order, graphs,
grad_vs_eager, rank_diff, first_key}], inductor {cold_s, warm_s, eager_step_s, grad_vs_eager}
(null with --skip-inductor), env.
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

# code/, one folder up, holds what every family of labs shares: pace, provenance, lab_cli,
# the launcher. Put it on the path, so this script runs from any folder.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from launcher import file_store, spawn_ranks  # noqa: E402  (code/; torch-free until it spawns)

# One layer per bucket; DDP's default size passed explicitly, which turns off DDP's small
# first bucket (chapter 3); and no cap at all (None): DDP's default, small first bucket kept.
BUCKET_CAPS_MB = (1, 25, None)
INDUCTOR_CAP_MB = 25  # the inductor timing's DDP
ORDERS = ("torch.compile(DDP(model))", "DDP(torch.compile(model))", "torch.compile(model), no DDP")


# ---------------------------------------------------------------------------------------------
# Settings: checked before torch is imported
# ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=6, help="Linear+tanh layers (default 6)")
    parser.add_argument("--width", type=int, default=512, help="features per layer")
    parser.add_argument("--batch", type=int, default=8, help="examples per rank")
    parser.add_argument(
        "--skip-inductor", action="store_true", help="leave out the inductor timing (the slow part)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="process-group timeout, s")
    parser.add_argument("--json", metavar="PATH", help="write every figure here")
    args = parser.parse_args(argv)
    for name in ("layers", "width", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


# ---------------------------------------------------------------------------------------------
# What each rank does
# ---------------------------------------------------------------------------------------------
def build_model(layers, width):
    import torch
    import torch.nn as nn

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

        def forward(self, x):
            for layer in self.layers:
                x = torch.tanh(layer(x))
            return x

    torch.manual_seed(0)  # every rank, every way: the same starting weights
    return Stack()


class GraphCounter:
    """A torch.compile backend that counts the graphs dynamo hands it and runs them as traced."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


def count_buckets(ddp):
    """Have `ddp` count the buckets it all-reduces (torch's default hook, counted)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    counted = {"buckets": 0}

    def hook(state, bucket):
        counted["buckets"] += 1
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    return counted


def iterations(module, x, y, counted=None, times=2):
    """Forward and backward `times` times (the first compiles, and DDP rebuilds its buckets
    in the second): the seconds each took, and the last one's gradients."""
    import torch.nn.functional as F

    seconds = []
    for _ in range(times):
        if counted is not None:
            counted["buckets"] = 0
        module.zero_grad(set_to_none=True)
        started = time.perf_counter()
        F.mse_loss(module(x), y).backward()
        seconds.append(time.perf_counter() - started)
    grads = [p.grad.detach().clone() for p in module.parameters()]
    return seconds, grads


def largest_diff(grads, reference):
    return max((a - b).abs().max().item() for a, b in zip(grads, reference, strict=True))


def rank_diff(grads):
    """Largest difference between this rank's gradients and rank 0's (0.0: in sync)."""
    import torch
    import torch.distributed as dist

    flat = torch.cat([g.flatten() for g in grads])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return max((g - gathered[0]).abs().max().item() for g in gathered)


def graphs_per_bucket_cap(args, x, y):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    rows = []
    for cap in BUCKET_CAPS_MB:
        torch._dynamo.reset()  # a fresh compile: graphs from earlier ways are not reused
        counter = GraphCounter()
        ddp = DDP(build_model(args.layers, args.width), bucket_cap_mb=cap)  # None: default
        counted = count_buckets(ddp)
        iterations(torch.compile(ddp, backend=counter), x, y, counted)
        rows.append({"bucket_cap_mb": cap, "graphs": counter.graphs, **counted})
        del ddp
    return rows


def wrap(order, model, backend):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    cap = BUCKET_CAPS_MB[0]
    if order == ORDERS[0]:
        return torch.compile(DDP(model, bucket_cap_mb=cap), backend=backend)
    if order == ORDERS[1]:
        return DDP(torch.compile(model, backend=backend), bucket_cap_mb=cap)
    return torch.compile(model, backend=backend)


def both_orders(args, x, y, eager):
    import torch

    rows = []
    for order in ORDERS:
        torch._dynamo.reset()
        counter = GraphCounter()
        module = wrap(order, build_model(args.layers, args.width), counter)
        _, grads = iterations(module, x, y)
        rows.append(
            {
                "order": order,
                "graphs": counter.graphs,
                # without DDP nothing averages the ranks' gradients: not comparable
                "grad_vs_eager": None if "no DDP" in order else largest_diff(grads, eager),
                "rank_diff": rank_diff(grads),
                "first_key": next(iter(module.state_dict())),
            }
        )
        del module
    return rows


def inductor_cold_and_warm(args, x, y, eager):
    """First iterations under inductor, on an empty cache and then on the cache it filled."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    firsts = []
    for _ in ("cold", "warm"):
        torch._dynamo.reset()  # dynamo traces again; inductor may reuse what it wrote
        ddp = DDP(build_model(args.layers, args.width), bucket_cap_mb=INDUCTOR_CAP_MB)
        seconds, grads = iterations(torch.compile(ddp), x, y)
        firsts.append(seconds[0])
        del ddp
    plain = DDP(build_model(args.layers, args.width), bucket_cap_mb=INDUCTOR_CAP_MB)
    eager_steps, _ = iterations(plain, x, y, times=3)  # the third: a step like any later one
    del plain
    return {
        "cold_s": firsts[0],
        "warm_s": firsts[1],
        "eager_step_s": eager_steps[-1],
        "grad_vs_eager": largest_diff(grads, eager),
    }


def rank_worker(rank, world_size, run_dir, args):
    import datetime

    # Each rank compiles into an empty cache of its own, so the first compile is truly cold
    # and one rank never finds what the other just wrote. Set before torch reads it.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(run_dir, f"inductor-rank{rank}")
    # Inductor keeps its precompiled headers in the system's temp folder, whatever its cache
    # folder: make that the run's too, so that nothing outlives the run.
    os.environ["TMPDIR"] = tempfile.tempdir = run_dir
    import torch

    # torch._dynamo comes before the process group: first imported after it (as the
    # first DDP or torch.optim use does), it keeps the group alive past
    # destroy_process_group, and the exit can abort (chapter 4).
    import torch._dynamo  # noqa: F401
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)  # two ranks on a small machine: one compute thread each
    dist.init_process_group(
        "gloo",
        init_method=file_store(run_dir),
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=args.timeout),
    )
    try:
        torch.manual_seed(1 + rank)  # each rank its own batch
        x, y = torch.randn(args.batch, args.width), torch.randn(args.batch, args.width)
        eager_ddp = DDP(build_model(args.layers, args.width), bucket_cap_mb=BUCKET_CAPS_MB[0])
        _, eager = iterations(eager_ddp, x, y)
        del eager_ddp
        measured = {
            "graphs": graphs_per_bucket_cap(args, x, y),
            "orders": both_orders(args, x, y, eager),
            "inductor": None if args.skip_inductor else inductor_cold_and_warm(args, x, y, eager),
            "layer_bytes": sum(p.nbytes for p in build_model(1, args.width).parameters()),
        }
        if rank == 0:
            with open(os.path.join(run_dir, "rank0.json"), "w") as file:
                json.dump(measured, file)
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def diff(value):
    return "-" if value is None else f"{value:.1e}"


def print_report(result):
    mib = result["layer_bytes"] / 2**20
    print("== graphs ==")
    print(
        f"torch.compile(DDP(model)), {result['world_size']} ranks over gloo: "
        f"{result['layers']} x Linear({result['width']}, {result['width']}) + tanh, "
        f"{mib:.2f} MiB a layer"
    )
    print(f"{'bucket_cap_mb':>13}{'buckets reduced':>17}{'graphs compiled':>17}")
    for row in result["graphs"]:
        cap = "default" if row["bucket_cap_mb"] is None else row["bucket_cap_mb"]
        print(f"{cap:>13}{row['buckets']:>17}{row['graphs']:>17}")
    print("== orders ==")
    cap = BUCKET_CAPS_MB[0]
    print(f"bucket_cap_mb {cap}; gradients compared with eager DDP's and across the ranks")
    print(f"{'':<30}{'graphs':>6}{'vs eager':>10}{'rank 1-0':>10}  state_dict's first key")
    for row in result["orders"]:
        print(
            f"{row['order']:<30}{row['graphs']:>6}{diff(row['grad_vs_eager']):>10}"
            f"{diff(row['rank_diff']):>10}  {row['first_key']}"
        )
    inductor, base = result["inductor"], result["import_torch_s"]
    if inductor is None:
        return
    print("== inductor ==")
    print(f"torch.compile(DDP(model)) with inductor, bucket_cap_mb {INDUCTOR_CAP_MB}")
    rows = [
        ("first iteration, empty cache", inductor["cold_s"]),
        ("first iteration, warm cache", inductor["warm_s"]),
        ("one eager DDP step", inductor["eager_step_s"]),
        ("`import torch`, same run", base),
    ]
    for label, seconds in rows:
        print(f"{label:<30}{seconds:8.2f} s {seconds / base:6.2f}x import torch")
    print(f"largest |grad - eager DDP's grad|: {inductor['grad_vs_eager']:.1e}")


def check(result):
    """The claims the page makes from this run; the first that fails ends the script."""
    small, large, default = result["graphs"]
    if small["graphs"] != small["buckets"]:
        return f"{small['graphs']} graphs for {small['buckets']} buckets of one layer each"
    if large["graphs"] >= small["graphs"]:
        return "a larger bucket cap did not give fewer graphs"
    if default["graphs"] != default["buckets"]:
        return f"at DDP's default cap, {default['graphs']} graphs for {default['buckets']} buckets"
    # An explicit cap drops DDP's small first bucket (chapter 3); dynamo's cuts stay the same
    if large["buckets"] >= default["buckets"] or large["graphs"] != default["graphs"]:
        return "an explicit 25 MiB cap kept DDP's small first bucket, or changed the graphs"
    for row in result["orders"]:
        synced = "no DDP" not in row["order"]
        if synced and (row["grad_vs_eager"] != 0.0 or row["rank_diff"] != 0.0):
            return f"{row['order']}: gradients differ from eager DDP's or between ranks"
        if not synced and row["rank_diff"] == 0.0:
            return "without DDP the ranks' gradients agree: the data is not each rank's own"
    # inductor fuses and reorders float32 arithmetic: rounding, not a different gradient
    if result["inductor"] and result["inductor"]["grad_vs_eager"] > 1e-5:
        return "inductor's gradients differ from eager DDP's beyond float32 rounding"
    return None


def main(argv=None):
    args = parse_args(argv)
    import pace
    from provenance import machine_facts

    import_s = pace.import_seconds()  # this process's own `import torch`, the yardstick
    with spawn_ranks(rank_worker, 2, (args,), "compile-ddp-") as run_dir:
        measured = json.loads(pathlib.Path(run_dir, "rank0.json").read_text())
    result = {
        "world_size": 2,
        "layers": args.layers,
        "width": args.width,
        "batch": args.batch,
        "import_torch_s": import_s,
        **measured,
        "env": machine_facts(),
    }
    print_report(result)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)
    if failed := check(result):
        sys.exit(failed)


if __name__ == "__main__":
    main()
