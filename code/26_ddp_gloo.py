"""DDP on CPU with gloo: eight collectives, then naive data parallelism against torch's DDP.

Run it (two ranks, five steps; --json PATH keeps every number it prints and more):

    python code/26_ddp_gloo.py --world-size 2 --steps 5
    python code/26_ddp_gloo.py --world-size 3 --sweep     # uneven shards, all_reduce sweep

The same script under torchrun, which sets RANK, WORLD_SIZE and MASTER_* for each worker:

    torchrun --standalone --nproc_per_node=2 code/26_ddp_gloo.py --torchrun
    # if --standalone stalls in rendezvous, give the loopback address and a free port:
    PORT=$(python -c "import socket; s=socket.socket(); s.bind(('',0)); print(s.getsockname()[1])")
    torchrun --nnodes=1 --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=$PORT \
        code/26_ddp_gloo.py --torchrun

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
ddp_lab.py.

The --json file (one object):
  lab, backend, launcher ("mp.spawn" or "torchrun"), start_method ("spawn", "forkserver",
  or null under torchrun), world_size, steps, timeout_s, samples, per_rank (samples per rank
  per step), padded (repeats DistributedSampler added per step)
  collectives            {all_reduce_sum, all_reduce_avg, all_reduce_max, all_gather,
                          reduce_scatter, broadcast, all_to_all_single, send_recv_ring: bool,
                          or null when it cannot run (the ring at world size 1)}
  collectives_ok         bool: no collective above is false
  api                    {all_gather, reduce_scatter: the torch.distributed function that ran}
  reduce_scatter_avg_behaviour   "averages" | "sums" | "cannot tell at world size 1" | ...
  reduce_scatter_avg_value       what rank 0 received (ranks contribute 1, 2, ..., p)
  avg_beyond_all_reduce  {reduce_avg_on_dst, reduce_avg_input_left_on_others: what rank 0
                          held after reduce with AVG to dst 0 and to dst p-1 (ranks give 1..p),
                          integer_all_reduce_avg: "raises TypeName" or the int64 result}
  variants               {naive, ddp, ddp_no_sync: {max_abs_diff: max |param - reference|
                          on rank 0, replicas_identical: bool (null if the check never ran)}}
  control_max_abs_diff   max |param - reference| for the control
  thresholds             {variant_max, control_min}: what the verdict demands
  replicas_identical     bool: every variant's replicas are bit-identical
  ddp_buckets, ddp_bucket_bytes
  allreduce_4mib         {bytes, seconds, algbw_GBps, busbw_GBps}
  memcpy_4mib            {bytes, seconds, GBps, convention}
  busbw_over_memcpy      allreduce_4mib.busbw_GBps / memcpy_4mib.GBps
  sweep                  only with --sweep: [{bytes, seconds, algbw_GBps, busbw_GBps,
                          memcpy_seconds, memcpy_GBps}], 4 KiB to 64 MiB in powers of 4
  timeline_s             {phase: seconds from the script's start until every rank had reached
                          that phase; done: when rank 0 finished}
  failures               [what failed, in words]; verdict: "PASS" if none, else "FAIL"
  env                    provenance.machine_facts()
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import lab_cli  # siblings in code/, as is ddp_lab
import launcher

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
    # Fault injection, for the tests: crash:R makes rank R raise before training; skip:R makes
    # rank R skip the replica check (a collective under an `if`), so the others wait for it.
    parser.add_argument("--inject-fault", metavar="KIND:RANK", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    lab_cli.check_common(parser, args)
    if args.world_size is None:
        args.world_size = 2
    args.fault = parse_fault(parser, args.inject_fault, args.world_size)
    return args


def parse_fault(parser, text, world_size):
    if text is None:
        return None
    kind, _, rank = text.partition(":")
    if kind not in ("crash", "skip") or not rank.isdigit() or int(rank) >= world_size:
        parser.error(f"--inject-fault wants crash:RANK or skip:RANK with RANK < {world_size}")
    return kind, int(rank)


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
import ddp_lab as lab  # noqa: E402
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
    if args.fault == ("crash", rank):  # fault injection for the tests (--inject-fault)
        raise RuntimeError(f"injected fault: rank {rank} crashed before training")

    m["params"], m["ddp_bucket_bytes"] = lab.train_variants(
        rank, world_size, CPU, args.steps, checkpoint
    )

    m["replicas"] = {}
    if args.fault != ("skip", rank):  # fault injection: this rank skips the whole phase
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
    """Everything measured, in the order of the JSON schema in the docstring, and the verdict."""
    r = lab.summary("26_ddp_gloo", "gloo", args.start_method, m, reference, control, args)
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


if __name__ == "__main__":
    main(ARGS)
