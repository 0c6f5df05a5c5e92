"""DDP on CPU with gloo: eight collectives, then naive data parallelism against torch's DDP.

Run it (two ranks, five steps; --json PATH keeps every number it prints and more):

    python code/ddp/gloo.py --world-size 2 --steps 5
    python code/ddp/gloo.py --world-size 3 --sweep     # uneven shards, all_reduce sweep

The same script under torchrun, which sets RANK, WORLD_SIZE and MASTER_* for each worker:

    torchrun --standalone --nproc_per_node=2 code/ddp/gloo.py --torchrun
    # if --standalone stalls in rendezvous, give the loopback address and a free port:
    PORT=$(python -c "import socket; s=socket.socket(); s.bind(('',0)); print(s.getsockname()[1])")
    torchrun --nnodes=1 --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=$PORT \
        code/ddp/gloo.py --torchrun

Without --torchrun the script starts its own ranks with torch.multiprocessing.spawn; they meet
through a file in a fresh temporary directory (file://), so no port is needed. Every rank

1. checks eight collectives against closed forms and ANDs the results with a MIN all_reduce;
2. trains a float64 Linear(8,16)-Tanh-Linear(16,1) with SGD and momentum on its
   DistributedSampler shard three ways: naive (broadcast, then all_reduce and divide),
   DistributedDataParallel, and DDP with no_sync over two micro-batches. Ranks are seeded
   differently, so only the initial broadcast makes the replicas agree;
3. all-gathers the parameters to check that the replicas are bit-identical, and times a 4 MiB
   all_reduce next to a 4 MiB memory copy.

Rank 0 also trains a single-process reference on the full (padded) batch and a control that
trains on rank 0's shard without any communication, prints the report and writes the JSON.
What the NCCL lab does too lives once, shared: the command line in lab_cli.py, the rest in
ddp_common.py.
"""

import os
import pathlib
import shutil
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
        parser, "processes to spawn (default 2; --torchrun takes WORLD_SIZE)", timeout=60.0
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="also time all_reduce and memcpy from 4 KiB to 64 MiB (about 2 s)",
    )
    lab_cli.add_torchrun_and_json(parser)
    parser.add_argument(
        "--start-method",
        choices=("spawn", "forkserver"),
        default="spawn",
        help="how ranks start without torchrun: fresh interpreters (spawn) or "
        "forks of a server that imported torch once (forkserver, faster)",
    )
    args = parser.parse_args(argv)
    lab_cli.check_common(parser, args)
    if args.world_size is None:
        args.world_size = 2
    return args


# ---------------------------------------------------------------------------------------------
# Start-up: the run's own directory and, if asked for, a forkserver (both before torch)
# ---------------------------------------------------------------------------------------------
def start_forkserver(run_dir):
    """Start a forkserver that imports torch while this process imports it too.

    With spawn, the default, each rank is a new interpreter that imports torch and, at the
    first optimizer or DDP, torch._dynamo: about 3 s of CPU per rank, and only after this
    process has spent 2 s importing torch for mp.spawn itself. A forkserver started here, before
    that import, loads both once, alongside this process, and forks ranks with everything in
    memory. The ranks run the same code; only their start is cheaper. Forking right after the
    imports is safe for the same reason DataLoader workers are forked on Linux: nothing has run
    yet (no computation, no process group, no CUDA).
    """
    import multiprocessing.forkserver

    multiprocessing.set_forkserver_preload(["__main__", "torch._dynamo"])
    with launcher.temp_files_in(run_dir):  # the server's socket goes in run_dir
        try:
            multiprocessing.forkserver.ensure_running()
        except OSError as err:  # a socket path is limited to about 100 bytes
            program = os.path.basename(sys.argv[0])
            print(f"{program}: error: no forkserver socket in {run_dir}: {err}", file=sys.stderr)
            shutil.rmtree(run_dir, ignore_errors=True)
            sys.stderr.flush()
            os._exit(1)  # multiprocessing's exit hook would look for the directory just removed


ARGS = None  # a spawned rank imports this file too, and gets its arguments from mp.spawn
if __name__ == "__main__":
    ARGS = parse_args()
    if not ARGS.torchrun:
        # One fresh directory for all this run puts on disk, removed by launcher.launch(): the file://
        # store, torch's per-rank error files, the forkserver's socket.
        ARGS.run_dir = tempfile.mkdtemp(prefix="ddp-lab-")
        if ARGS.start_method == "forkserver":
            start_forkserver(ARGS.run_dir)

# ---------------------------------------------------------------------------------------------
# The heavy imports, once the arguments are known to be good (spawned ranks start here too)
# ---------------------------------------------------------------------------------------------
import ddp_common as lab  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

CPU = torch.device("cpu")
PHASES = ("collectives", *lab.VARIANTS, "replicas", "timing", "done")
SWEEP = lab.sweep_sizes(4 << 10, 64 << 20)


def cpu_sync():
    """The timing's device hook: on CPU the work is done when the call returns."""


# ---------------------------------------------------------------------------------------------
# One rank
# ---------------------------------------------------------------------------------------------
def run_rank(rank, world_size, init_method, args):
    """Everything one rank does; rank 0 adds the reference, the control and the report."""
    # p processes share the machine's cores; more than one thread each only makes them fight.
    torch.set_num_threads(1)
    checkpoint = lab.start_process_group(
        "gloo", init_method, rank, world_size, args.timeout, PHASES
    )
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        measured = distributed_part(rank, world_size, args, checkpoint)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return
    reference, control = lab.reference_and_control(world_size, args.steps, CPU)
    checkpoint.passed["done"] = time.time()
    results = summarise(measured, reference, control, checkpoint.passed, args)
    lab.publish(results, report(results), args.json)


def distributed_part(rank, world_size, args, checkpoint):
    """The part every rank runs, phase by phase; returns what rank 0 needs for the report."""
    m = {}
    checkpoint("collectives")
    m["collectives"], m["api"] = lab.check_collectives(CPU)
    m["reduce_scatter_avg"] = lab.reduce_scatter_avg_behaviour(CPU)
    m["avg_beyond_all_reduce"] = lab.avg_beyond_all_reduce(CPU)

    m["params"], m["ddp_bucket_bytes"] = lab.train_variants(
        rank, world_size, CPU, args.steps, checkpoint
    )

    checkpoint("replicas")
    m["replicas"] = {name: lab.replicas_identical(p) for name, p in m["params"].items()}

    checkpoint("timing")
    m["allreduce_4mib"] = lab.time_all_reduce(4 * lab.MiB, CPU, cpu_sync)
    sizes = SWEEP if args.sweep else []
    m["sweep"] = [lab.time_all_reduce(n, CPU, cpu_sync, warmup=1, reps=5) for n in sizes]
    # The copies run on rank 0 alone while the other ranks wait, so that they measure the
    # memory, not a fight for it. The barrier is outside the `if`: every rank calls it.
    if rank == 0:
        m["memcpy_4mib"] = lab.time_memcpy(4 * lab.MiB, CPU, cpu_sync)
        for row in m["sweep"]:
            copy = lab.time_memcpy(row["bytes"], CPU, cpu_sync, warmup=1, reps=5)
            row.update(memcpy_seconds=copy["seconds"], memcpy_GBps=copy["GBps"])
    dist.barrier()

    checkpoint("done")
    return m


# ---------------------------------------------------------------------------------------------
# Report (rank 0)
# ---------------------------------------------------------------------------------------------
def summarise(m, reference, control, passed, args):
    """Everything measured, the sweep if asked for, and the verdict."""
    r = lab.summary("ddp_gloo", "gloo", args.start_method, m, reference, control, args)
    if args.sweep:
        r["sweep"] = m["sweep"]
    return lab.conclude(r, passed, args.started)


def report(r):
    """What rank 0 prints: the run, the correctness table, the timing, the verdict."""
    ranks = f"{r['world_size']} rank" + "s" * (r["world_size"] > 1)
    padding = f" (DistributedSampler repeats {r['padded']} to pad)" if r["padded"] else ""
    ar, copy = r["allreduce_4mib"], r["memcpy_4mib"]
    lines = [
        f"DDP on gloo: {ranks} via {r['launcher']}, {r['steps']} steps, {r['samples']} samples"
        f" -> {r['per_rank']} per rank per step{padding}",
        *lab.correctness_lines(r),
        f"all_reduce 4 MiB: {ar['seconds'] * 1e3:.2f} ms, algbw {ar['algbw_GBps']:.2f} GB/s,"
        f" busbw {ar['busbw_GBps']:.2f} GB/s = {r['busbw_over_memcpy']:.3f} x memcpy"
        f" ({copy['GBps']:.1f} GB/s, each byte counted once)",
    ]
    if "sweep" in r:
        first, last = r["sweep"][0]["bytes"], r["sweep"][-1]["bytes"]
        lines.append(
            f"sweep: all_reduce and memcpy at {len(r['sweep'])} sizes from"
            f" {lab.format_bytes(first)} to {lab.format_bytes(last)} (in the JSON)"
        )
    lines.append(lab.verdict_line(r))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Launch
# ---------------------------------------------------------------------------------------------
def main(args):
    args.started = STARTED  # spawned ranks import this file afresh; they get the parent's clock
    launcher.launch(run_rank, args, args.start_method)


if ARGS is not None:  # this process started the lab; a spawned rank stops at the definitions
    main(ARGS)
