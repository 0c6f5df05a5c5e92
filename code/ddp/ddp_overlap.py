"""When do DDP's all_reduces run? A measured timeline of one backward pass, DDP against naive.

Run it (two ranks over gloo; --json PATH keeps every timestamp, for the site's timeline):

    python code/ddp/ddp_overlap.py
    python code/ddp/ddp_overlap.py --layers 8 --bucket-cap-mb 8 --json overlap.json

Two processes, spawned and joined through a file:// store in a fresh temp directory, train the
same stack of Linear+Tanh layers on different data, and time each backward pass twice:

1. under DistributedDataParallel, whose comm hook is torch's default allreduce hook wrapped to
   note when each bucket's all_reduce was launched and when its future completed;
2. as naive data parallelism: the whole backward first, then one blocking all_reduce per
   parameter, in model.parameters() order, as the module's baseline does.

Both record when each parameter's gradient was ready (register_post_accumulate_grad_hook), as
seconds since backward() was called, on rank 0's clock. A small bucket_cap_mb gives DDP several
buckets. Warm-up iterations come first: DDP puts every gradient in one bucket on its first
iteration and rebuilds its buckets from the order it observed, so only later ones show the
buckets it keeps. The figure uses the iteration with the median step time of each method.

Each rank is pinned to one core of its own (Linux; elsewhere the OS places them), and that core
does both the rank's backward and its share of gloo's all_reduce: copying through sockets and
adding are CPU work too. An all_reduce started during backward therefore slows that backward,
and the step saves less than the time the all_reduces overlapped it. Overlap pays where
communication has hardware of its own (a GPU's copy engines and the network, under NCCL).

The --json file (one object):
  world_size, backend, layers, width, batch, bucket_cap_mb, warmup, iterations
  parameters         [{name, layer, bytes}] in model.parameters() order
  first_iteration_buckets   how many buckets DDP used on its very first backward
  first_iteration    that backward, as a run of ddp.runs below: the order its gradients
                      became ready, from which DDP rebuilds the buckets, and its buckets
  ddp                {runs: [{ready: {name: s}, buckets: [{index, params, bytes, launch_s,
                      done_s}], step_s}], shown: index into runs}
  naive              {runs: [{ready, allreduces: [{param, bytes, launch_s, done_s}],
                      backward_s, step_s}], shown}
  grad_max_abs_diff  largest |DDP grad - naive grad| on rank 0, last iteration (same math)
  cores              {available, pinned}: the cores this script could use, and whether each
                      rank ran on one core of its own
  env                provenance.machine_facts()
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

# code/, one folder up, holds what every family of labs shares: pace, provenance, lab_cli,
# the launcher. Put it on the path, so this script runs from any folder.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from launcher import file_store, spawn_ranks  # noqa: E402  (code/; torch-free until it spawns)


# ---------------------------------------------------------------------------------------------
# Settings: checked before torch is imported
# ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (2 to 8)")
    parser.add_argument("--layers", type=int, default=6, help="Linear+Tanh layers in the model")
    parser.add_argument("--width", type=int, default=1024, help="features per layer")
    parser.add_argument("--batch", type=int, default=64, help="examples per rank per step")
    parser.add_argument(
        "--bucket-cap-mb", type=float, default=4.0, help="DDP bucket cap, MiB (default 4)"
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    parser.add_argument("--iterations", type=int, default=5, help="timed iterations")
    parser.add_argument("--timeout", type=float, default=30.0, help="process-group timeout, s")
    parser.add_argument("--json", metavar="PATH", help="write every timestamp here")
    args = parser.parse_args(argv)
    if not 2 <= args.world_size <= 8:
        parser.error("--world-size must be between 2 and 8")
    for name in ("layers", "width", "batch", "iterations"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 1:
        parser.error("--warmup must be at least 1 (DDP rebuilds its buckets after iteration 1)")
    if args.bucket_cap_mb <= 0:
        parser.error("--bucket-cap-mb must be positive")
    return args


# ---------------------------------------------------------------------------------------------
# What each rank does
# ---------------------------------------------------------------------------------------------
def build_model(layers, width):
    import torch.nn as nn

    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*blocks)


class Timeline:
    """One backward pass's events, in seconds since `start`: gradients ready, buckets reduced."""

    def __init__(self, model):
        self.reset()
        for name, param in model.named_parameters():
            param.register_post_accumulate_grad_hook(lambda _, name=name: self.ready_now(name))

    def ready_now(self, name):
        self.ready[name] = time.perf_counter() - self.start

    def reset(self):
        self.start, self.ready, self.buckets = time.perf_counter(), {}, []


def timed_allreduce_hook(timeline, names):
    """torch's default DDP hook (divide by world size, all_reduce), with both ends timed."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def hook(state, bucket):
        launched = time.perf_counter() - timeline.start
        future = default_hooks.allreduce_hook(state, bucket)

        def finished(done):
            # Runs on gloo's thread as soon as the all_reduce completes.
            timeline.buckets.append(
                {
                    "index": bucket.index(),
                    "params": [names[id(p)] for p in bucket.parameters()],
                    "bytes": bucket.buffer().numel() * bucket.buffer().element_size(),
                    "launch_s": launched,
                    "done_s": time.perf_counter() - timeline.start,
                }
            )
            return done.value()

        return future.then(finished)

    return hook


def ddp_backward(ddp, timeline, x, y):
    """One DDP backward; backward() returns once every bucket's all_reduce has finished."""
    import torch.nn.functional as F

    ddp.zero_grad(set_to_none=True)
    loss = F.mse_loss(ddp(x), y)
    timeline.reset()
    loss.backward()
    step = time.perf_counter() - timeline.start
    buckets = sorted(timeline.buckets, key=lambda b: b["launch_s"])
    return {"ready": timeline.ready, "buckets": buckets, "step_s": step}


def naive_backward(model, timeline, x, y, world_size):
    """The baseline: all of backward, then one blocking all_reduce per parameter."""
    import torch.distributed as dist
    import torch.nn.functional as F

    model.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), y)
    timeline.reset()
    loss.backward()
    backward = time.perf_counter() - timeline.start
    calls = []
    for name, param in model.named_parameters():
        launched = time.perf_counter() - timeline.start
        dist.all_reduce(param.grad)
        param.grad.div_(world_size)
        done = time.perf_counter() - timeline.start
        calls.append(
            {"param": name, "bytes": param.grad.nbytes, "launch_s": launched, "done_s": done}
        )
    return {"ready": timeline.ready, "allreduces": calls, "backward_s": backward, "step_s": done}


def pin_to_one_core(rank, world_size):
    """Give this rank one core of its own, for its compute and gloo's threads alike.

    Returns (cores available, pinned one each). Pinned before init_process_group, so that the
    threads gloo starts there inherit the core.
    """
    if not hasattr(os, "sched_setaffinity"):  # macOS, Windows: the OS places the ranks
        return os.cpu_count(), False
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[rank % len(cores)]})
    return len(cores), len(cores) >= world_size


def rank_worker(rank, world_size, run_dir, args):
    import copy
    import datetime

    import torch

    # torch._dynamo comes before the process group: first imported after it (as the
    # first DDP or torch.optim use does), it keeps the group alive past
    # destroy_process_group, and the exit can abort (chapter 4).
    import torch._dynamo  # noqa: F401
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    available, pinned = pin_to_one_core(rank, world_size)
    torch.set_num_threads(1)  # one core per rank: one compute thread
    dist.init_process_group(
        "gloo",
        init_method=file_store(run_dir),
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=args.timeout),
    )
    try:
        torch.manual_seed(0)
        model = build_model(args.layers, args.width)
        plain = copy.deepcopy(model)  # the naive copy: same weights, no DDP
        ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
        names = {id(p): name for name, p in model.named_parameters()}
        ddp_timeline, naive_timeline = Timeline(model), Timeline(plain)
        ddp.register_comm_hook(None, timed_allreduce_hook(ddp_timeline, names))

        torch.manual_seed(1 + rank)  # each rank its own shard of data
        x, y = torch.randn(args.batch, args.width), torch.randn(args.batch, args.width)
        ddp_runs, naive_runs = [], []
        for it in range(args.warmup + args.iterations):
            # Alternate the two methods, so that both see the same state of the machine.
            ddp_run = ddp_backward(ddp, ddp_timeline, x, y)
            naive_run = naive_backward(plain, naive_timeline, x, y, world_size)
            if it == 0:
                first_run = ddp_run  # the buckets DDP starts with, before any rebuild
            if it >= args.warmup:
                ddp_runs.append(ddp_run)
                naive_runs.append(naive_run)
        diff = max(
            (a.grad - b.grad).abs().max().item()
            for a, b in zip(model.parameters(), plain.parameters(), strict=True)
        )
        if rank == 0:
            parameters = [
                {"name": name, "layer": int(name.split(".")[0]) // 2, "bytes": p.nbytes}
                for name, p in model.named_parameters()
            ]
            measured = {
                "parameters": parameters,
                "first_iteration_buckets": len(first_run["buckets"]),
                "first_iteration": first_run,
                "ddp": {"runs": ddp_runs, "shown": median_index(ddp_runs)},
                "naive": {"runs": naive_runs, "shown": median_index(naive_runs)},
                "grad_max_abs_diff": diff,
                "cores": {"available": available, "pinned": pinned},
            }
            with open(os.path.join(run_dir, "rank0.json"), "w") as file:
                json.dump(measured, file)
    finally:
        dist.destroy_process_group()


def median_index(runs):
    """The run whose step time is the median (the lower middle one for an even count)."""
    steps = [run["step_s"] for run in runs]
    return steps.index(statistics.median_low(steps))


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def ms(seconds):
    return f"{seconds * 1e3:8.1f} ms"


def print_report(args, result):
    ddp = result["ddp"]["runs"][result["ddp"]["shown"]]
    naive = result["naive"]["runs"][result["naive"]["shown"]]
    print(
        f"DDP overlap, gloo, {args.world_size} ranks: {args.layers} x Linear({args.width}, "
        f"{args.width}) + Tanh, batch {args.batch} per rank, bucket_cap_mb {args.bucket_cap_mb:g}"
    )
    print(
        f"rank 0, the median-step iteration of {args.iterations} (after {args.warmup} warm-up); "
        "times from the call to backward()"
    )
    rows = [
        ("last gradient ready", max(ddp["ready"].values()), max(naive["ready"].values())),
        (
            "first all_reduce launched",
            ddp["buckets"][0]["launch_s"],
            naive["allreduces"][0]["launch_s"],
        ),
        (
            "last all_reduce done",
            max(b["done_s"] for b in ddp["buckets"]),
            naive["allreduces"][-1]["done_s"],
        ),
        ("backward + gradient sync", ddp["step_s"], naive["step_s"]),
    ]
    print(f"{'':<28}{'DDP':>12}{'naive':>12}")
    for label, a, b in rows:
        print(f"{label:<28}{ms(a):>12}{ms(b):>12}")
    print(f"{'all_reduce calls':<28}{len(ddp['buckets']):>12}{len(naive['allreduces']):>12}")
    print(f"DDP buckets (first iteration: {result['first_iteration_buckets']}):")
    for bucket in ddp["buckets"]:
        print(
            f"  bucket {bucket['index']}: {bucket['bytes'] / 2**20:5.2f} MiB "
            f"[{', '.join(bucket['params'])}] {ms(bucket['launch_s'])} -> {ms(bucket['done_s'])}"
        )
    print(f"largest |DDP grad - naive grad|: {result['grad_max_abs_diff']:.1e}")
    cores = result["cores"]
    where = "one core of its own" if cores["pinned"] else "cores the OS chose"
    print(f"each rank ran on {where} ({cores['available']} available)")


def main(argv=None):
    args = parse_args(argv)
    from provenance import machine_facts

    with spawn_ranks(rank_worker, args.world_size, (args,), "ddp-overlap-") as run_dir:
        measured = json.loads(pathlib.Path(run_dir, "rank0.json").read_text())
    result = {
        "world_size": args.world_size,
        "backend": "gloo",
        "layers": args.layers,
        "width": args.width,
        "batch": args.batch,
        "bucket_cap_mb": args.bucket_cap_mb,
        "warmup": args.warmup,
        "iterations": args.iterations,
        **measured,
        "env": machine_facts(),
    }
    print_report(args, result)
    if result["grad_max_abs_diff"] > 1e-4:
        sys.exit("DDP and naive gradients disagree: the timings would compare different work")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
