"""DDP on GPUs with NCCL: the gloo lab's checks on CUDA tensors, then what NCCL is fast at.

Run it with one process per GPU; torchrun is the usual launcher:

    torchrun --standalone --nproc_per_node=gpu code/ddp/nccl.py --torchrun --json out.json
    # if --standalone stalls in rendezvous, give the loopback address and a free port:
    PORT=$(python -c "import socket; s=socket.socket(); s.bind(('',0)); print(s.getsockname()[1])")
    torchrun --nnodes=1 --nproc_per_node=gpu --master_addr=127.0.0.1 --master_port=$PORT \
        code/ddp/nccl.py --torchrun

or let the script start one rank per visible GPU itself (torch.multiprocessing.spawn, file://):

    python code/ddp/nccl.py                    # every visible GPU
    python code/ddp/nccl.py --world-size 2     # the first two

Each rank binds GPU LOCAL_RANK, starts the default "nccl" backend with device_id (the
communicator is built at once, not at the first collective), and then, with the helpers the
gloo lab uses (ddp_common.py):

1. checks the eight collectives against closed forms, on CUDA tensors;
2. trains the same float64 model three ways (naive, DDP(model, device_ids=[local_rank]), DDP
   with no_sync) and compares each with a single-GPU reference and a no-communication control;
3. times all_reduce from 4 KiB to 1 GiB in float32 and bfloat16 (warm-up, CUDA-synchronised,
   median of back-to-back calls) and reports algbw and busbw as nccl-tests defines them;
4. times one DDP forward+backward of a wider bfloat16 model twice: under no_sync (compute
   only) and normally (compute plus the bucketed all_reduce that overlaps backward).

One GPU means world size 1: NCCL will not put two ranks of one communicator on the same
device, so there the collectives are identities and busbw is 0. Needs torch 2.8 or newer.

Which implementation "nccl" builds depends on the release: in 2.15 the in-tree nccl2 backend
(ProcessGroupNCCL2), unless TORCH_DIST_USE_NCCL2=0; before 2.15 the legacy ProcessGroupNCCL
(in 2.14, TORCH_DIST_USE_NCCL2=1 opts in to nccl2). The lab asks for plain "nccl", so it runs
on the default, and records which class it got:

    TORCH_DIST_USE_NCCL2=0 python code/ddp/nccl.py   # the legacy backend on 2.15, to compare
"""

import contextlib
import os
import pathlib
import sys
import tempfile
import time

# code/, one folder up, holds what every family of labs shares: pace, provenance, lab_cli,
# the launcher. Put it on the path, so this script runs from any folder.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import lab_cli  # noqa: E402  (code/, as is launcher; ddp_common is a sibling here)
import launcher  # noqa: E402

STARTED = time.time()  # the JSON's timeline counts from here, imports included


# ---------------------------------------------------------------------------------------------
# Settings: checked before torch is imported, so a typo costs milliseconds, not seconds
# ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    parser = lab_cli.OneLineParser(description=__doc__.split("\n\n")[0])
    lab_cli.add_world_size_steps_timeout(
        parser,
        "ranks to spawn, one per GPU (default: every visible GPU; --torchrun: WORLD_SIZE)",
        timeout=120.0,
    )
    lab_cli.add_torchrun_and_json(parser)
    args = parser.parse_args(argv)
    lab_cli.check_common(parser, args)  # a missing --world-size is settled once torch can count
    return args


ARGS = None  # a spawned rank imports this file too, and gets its arguments from mp.spawn
if __name__ == "__main__":
    ARGS = parse_args()

# ---------------------------------------------------------------------------------------------
# The heavy imports, once the arguments are known to be good (spawned ranks start here too)
# ---------------------------------------------------------------------------------------------
import ddp_common as lab  # noqa: E402
import provenance  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

PHASES = ("collectives", *lab.VARIANTS, "replicas", "sweep", "ddp_step", "done")
SWEEP = lab.sweep_sizes(4 << 10, 1 << 30)
SWEEP_DTYPES = {"sweep": torch.float32, "sweep_bf16": torch.bfloat16}
# The model for the step timing: wide enough that on a current GPU both its backward pass
# and the all_reduce of its gradients take milliseconds, not microseconds.
WIDTH, LAYERS, BATCH = 4096, 8, 4096
ONE_GPU_NOTE = (
    "one GPU visible, so world size 1: NCCL will not put two ranks of one communicator on the"
    " same device, and with one rank every collective is an identity (busbw 0)"
)


def gpu_problem(ranks_here):
    """Why this machine cannot run `ranks_here` NCCL ranks (None if it can)."""
    if not torch.cuda.is_available():
        return (
            f"no CUDA device is visible (torch {torch.__version__}, built for CUDA"
            f" {torch.version.cuda or 'none'}): the NCCL lab needs one GPU per rank;"
            " the gloo lab runs on CPU"
        )
    count = torch.cuda.device_count()
    if ranks_here is not None and ranks_here > count:
        return (
            f"{ranks_here} ranks on this machine need {ranks_here} GPUs and {count} are visible:"
            " NCCL will not put two ranks of one communicator on the same device"
        )
    return None


# ---------------------------------------------------------------------------------------------
# One rank
# ---------------------------------------------------------------------------------------------
def run_rank(rank, world_size, init_method, args):
    """Everything one rank does on its GPU; rank 0 adds the reference, control and report."""
    # Under torchrun LOCAL_RANK says which GPU of this machine is ours; spawned ranks are
    # all on one machine, so there the rank is the GPU index.
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if local_rank >= torch.cuda.device_count():
        raise RuntimeError(f"LOCAL_RANK {local_rank} but {torch.cuda.device_count()} GPUs")
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    checkpoint = lab.start_process_group(
        "nccl", init_method, rank, world_size, args.timeout, PHASES, device_id=device
    )
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        measured = distributed_part(rank, world_size, device, args, checkpoint)
        measured["nccl_backend"] = backend_class(device)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return
    reference, control = lab.reference_and_control(world_size, args.steps, device)
    checkpoint.passed["done"] = time.time()
    results = summarise(measured, reference, control, checkpoint.passed, args)
    lab.publish(results, report(results), args.json)


def distributed_part(rank, world_size, device, args, checkpoint):
    """The part every rank runs, phase by phase; returns what rank 0 needs for the report."""
    sync = torch.cuda.synchronize
    m = {}
    checkpoint("collectives")
    m["collectives"], m["api"] = lab.check_collectives(device)
    m["reduce_scatter_avg"] = lab.reduce_scatter_avg_behaviour(device)
    m["avg_beyond_all_reduce"] = lab.avg_beyond_all_reduce(device)

    m["params"], m["ddp_bucket_bytes"] = lab.train_variants(
        rank, world_size, device, args.steps, checkpoint
    )

    checkpoint("replicas")
    m["replicas"] = {name: lab.replicas_identical(p) for name, p in m["params"].items()}

    checkpoint("sweep")
    m["allreduce_4mib"] = lab.time_all_reduce(4 * lab.MiB, device, sync, iters=20)
    for key, dtype in SWEEP_DTYPES.items():
        m[key] = [
            lab.time_all_reduce(n, device, sync, dtype, warmup=2, reps=5, iters=iters_for(n))
            for n in SWEEP
        ]
    # Memory copies on rank 0 while the others wait, as in the gloo lab; every rank calls
    # the barrier. The same bytes take the same copy, whatever the all_reduce's dtype.
    if rank == 0:
        m["memcpy_4mib"] = lab.time_memcpy(4 * lab.MiB, device, sync, iters=20)
        for i, n in enumerate(SWEEP):
            copy = lab.time_memcpy(n, device, sync, warmup=2, reps=5, iters=iters_for(n))
            for key in SWEEP_DTYPES:
                m[key][i].update(memcpy_seconds=copy["seconds"], memcpy_GBps=copy["GBps"])
    dist.barrier()

    checkpoint("ddp_step")
    m["ddp_step"] = time_ddp_step(device, sync)

    checkpoint("done")
    return m


def backend_class(device):
    """The name of the class that runs the default group's collectives on `device`."""
    if hasattr(dist, "get_backend_impl"):  # public from 2.14
        return type(dist.get_backend_impl(device=device)).__name__
    return type(dist.group.WORLD._get_backend(device)).__name__


def iters_for(nbytes):
    """Back-to-back calls per timed round: many for small messages, one from 64 MiB up."""
    return max(1, min(20, (64 * lab.MiB) // nbytes))


def time_ddp_step(device, sync):
    """One forward+backward of a wide bfloat16 MLP under DDP, without and with communication.

    Under no_sync DDP skips the all_reduce, so that time is compute alone; the normal step
    adds the bucketed all_reduce, which overlaps backward. What is left over is communication
    that the overlap did not hide. For scale, the same gradient bytes all-reduced on their own.
    """
    torch.manual_seed(0)  # DDP broadcasts rank 0's weights anyway
    layers = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU()) for _ in range(LAYERS)]
    model = nn.Sequential(*layers).to(device=device, dtype=torch.bfloat16)
    dp = lab.TorchDDP(model)
    x = torch.randn(BATCH, WIDTH, device=device, dtype=torch.bfloat16)

    def step(communicate):
        model.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if communicate else dp.no_sync():
            dp(x).float().square().mean().backward()

    compute = lab.median_seconds(lambda: step(False), sync, warmup=3, reps=10)
    with_comm = lab.median_seconds(lambda: step(True), sync, warmup=3, reps=10)
    compute, with_comm = (lab.slowest_rank(t, device) for t in (compute, with_comm))
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    alone = lab.time_all_reduce(gradient_bytes, device, sync, torch.bfloat16, reps=5)
    return {
        "model": f"{LAYERS} x (Linear({WIDTH}, {WIDTH}) + GELU), bfloat16",
        "parameters": sum(p.numel() for p in model.parameters()),
        "gradient_bytes": gradient_bytes,
        "batch": BATCH,
        "buckets": len(dp.bucket_bytes()),
        "compute_only_s": compute,
        "with_comm_s": with_comm,
        "exposed_comm_s": with_comm - compute,
        "allreduce_gradients_s": alone["seconds"],
    }


# ---------------------------------------------------------------------------------------------
# Report (rank 0)
# ---------------------------------------------------------------------------------------------
def summarise(m, reference, control, passed, args):
    """Everything measured, with the gloo lab's keys first, then the GPU-only ones."""
    r = lab.summary("ddp_nccl", "nccl", "spawn", m, reference, control, args)
    r |= {
        "sweep": m["sweep"],
        "sweep_bf16": m["sweep_bf16"],
        "ddp_step": m["ddp_step"],
        "gpu": provenance.gpu_facts(),
        "nccl_backend": m["nccl_backend"],
        "note": ONE_GPU_NOTE if torch.cuda.device_count() == 1 else None,
    }
    return lab.conclude(r, passed, args.started)


def report(r):
    """What rank 0 prints: the GPUs, the correctness table, the sweep, the DDP step, the verdict."""
    g, step = r["gpu"], r["ddp_step"]
    ranks = f"{r['world_size']} rank" + "s" * (r["world_size"] > 1)
    lines = [
        f"DDP on NCCL: {ranks} via {r['launcher']}, one per {g['model']}"
        f" (CUDA {g['cuda']}, NCCL {g['nccl']}, driver {g['driver']})",
        f'backend "nccl" ran as {r["nccl_backend"]} (torch {torch.__version__})',
        *([f"note: {r['note']}"] if r["note"] else []),
        *lab.correctness_lines(r),
        "",
        f"{'all_reduce size':>15}{'fp32 ms':>10}{'busbw GB/s':>12}{'bf16 ms':>10}"
        f"{'busbw GB/s':>12}{'memcpy GB/s':>13}",
    ]
    for fp32, bf16 in zip(r["sweep"], r["sweep_bf16"], strict=True):
        lines.append(
            f"{lab.format_bytes(fp32['bytes']):>15}{fp32['seconds'] * 1e3:>10.3f}"
            f"{fp32['busbw_GBps']:>12.1f}{bf16['seconds'] * 1e3:>10.3f}"
            f"{bf16['busbw_GBps']:>12.1f}{fp32['memcpy_GBps']:>13.0f}"
        )
    lines += [
        "",
        f"DDP step, {step['model']}, batch {step['batch']}, {step['buckets']} bucket"
        f"{'s' * (step['buckets'] != 1)}:"
        f" compute only {step['compute_only_s'] * 1e3:.2f} ms, with all_reduce"
        f" {step['with_comm_s'] * 1e3:.2f} ms (exposed {step['exposed_comm_s'] * 1e3:.2f} ms;"
        f" the gradients' all_reduce alone takes {step['allreduce_gradients_s'] * 1e3:.2f} ms)",
        lab.verdict_line(r),
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Launch
# ---------------------------------------------------------------------------------------------
def main(args):
    args.started = STARTED  # spawned ranks import this file afresh; they get the parent's clock
    program = os.path.basename(sys.argv[0])
    # torchrun may span machines: only the ranks it starts on this one need GPUs here.
    here = args.world_size
    if args.torchrun:
        here = int(os.environ.get("LOCAL_WORLD_SIZE", args.world_size))
    problem = gpu_problem(here)
    if problem:
        print(f"{program}: error: {problem}", file=sys.stderr)
        sys.exit(2)
    if not args.torchrun:
        if args.world_size is None:
            args.world_size = torch.cuda.device_count()
        # The file:// store and torch's per-rank error files go in one fresh directory, which
        # launcher.launch() removes.
        args.run_dir = tempfile.mkdtemp(prefix="ddp-lab-")
    launcher.launch(run_rank, args)


if ARGS is not None:  # this process started the lab; a spawned rank stops at the definitions
    main(ARGS)
