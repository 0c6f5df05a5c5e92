"""Ring all_reduce one step at a time: a simulation, checked against a real gloo all_reduce.

Run it (four ranks; --json PATH also keeps every frame, for the site's step-through figure):

    python code/ddp/ring_allreduce.py --ranks 4
    python code/ddp/ring_allreduce.py --ranks 8 --elements 16 --json ring.json
    python code/ddp/ring_allreduce.py --ranks 4 --no-real      # the simulation alone, no torch

Every rank holds a vector of integers cut into p equal chunks. The ring is rank r -> rank r+1
(mod p), and every step each rank sends exactly one chunk to its right-hand neighbour:

1. reduce-scatter, p-1 steps: at step s rank r sends chunk r-s, and the receiver adds it to
   its own copy; afterwards rank r holds the complete sum of chunk r+1 (mod p);
2. all-gather, p-1 steps: at step s rank r sends chunk r+1-s, complete, and the receiver
   overwrites its copy; afterwards every rank holds the complete sum of every chunk.

This is the schedule of the module page's byte-model block, so its figure and that block agree.

Chunks are labelled with the ranks whose numbers they already carry ("c2: r0+r1+r3"). The
script counts the bytes each rank sends and compares them with the ring formula 2(p-1)S/p in
exact rational arithmetic. Then, unless --no-real, it spawns p processes that run torch's own
all_reduce and reduce_scatter with gloo on the same integers, and checks that every rank's
all_reduce answer equals the simulation's and that the chunk torch's reduce_scatter gives rank
j equals the simulation's complete chunk j, element for element (integers, so equality is
exact). The same processes then take a tour of every collective in the module page's table
(broadcast, reduce, all_gather, ..., scatter) on small integers, recording what each rank
passed and held afterwards, for the page's figure, and check it against the table. A
mismatch exits with status 1.

The --json file (one object):
  ranks, elements, element_bytes, tensor_bytes (S), chunk_elements
  inputs                 [rank][element]: what each rank starts with
  expected               the elementwise sum of the inputs, computed directly
  simulated              [rank][element]: what each rank holds when the ring finishes
  after_reduce_scatter   [chunk]: {chunk, owner, values}: each complete chunk after phase 1
  frames                 [{phase, step, sends: [{src, dst, chunk, carries}],
                           holdings: [rank][chunk] -> ranks carried, bytes_sent: [rank]}]
  bytes_sent             [rank]: bytes each rank sent in all
  ring_formula_bytes     2(p-1)S/p as {numerator, denominator}
  real                   null with --no-real, else {backend, world_size, seconds,
                          all_reduce: [rank][element], reduce_scatter: [rank][element],
                          tour: {call: {root, before, after}}}; tour is every collective of
                          the module page's table, in its order, run once on buffers whose
                          chunk j on rank r holds 10r + j: per rank, p slots (null: not in
                          that rank's tensor), or null where the rank passes or gets none
  checks                 {name: bool}; verdict "PASS" or "FAIL"
  env                    provenance.machine_facts()
"""

import argparse
import json
import os
import pathlib
import random
import sys
import time
from fractions import Fraction

# code/, one folder up, holds what every family of labs shares: pace, provenance, lab_cli,
# the launcher. Put it on the path, so this script runs from any folder.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


ELEMENT_BYTES = 8  # int64 on the wire, so that every sum is exact


# ---------------------------------------------------------------------------------------------
# Settings: checked before torch is imported
# ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4, help="ranks in the ring, p (2 to 16)")
    parser.add_argument(
        "--elements",
        type=int,
        default=None,
        help="int64 elements per rank, a multiple of --ranks (default 2 per chunk)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the ranks' input integers")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="process-group timeout, seconds"
    )
    parser.add_argument(
        "--no-real", action="store_true", help="skip the check against torch's gloo all_reduce"
    )
    parser.add_argument("--json", metavar="PATH", help="write every frame and result here")
    args = parser.parse_args(argv)
    if args.elements is None:
        args.elements = 2 * args.ranks
    if not 2 <= args.ranks <= 16:
        parser.error("--ranks must be between 2 and 16")
    if args.elements <= 0 or args.elements % args.ranks:
        parser.error("--elements must be a positive multiple of --ranks (equal chunks)")
    return args


def make_inputs(ranks, elements, seed):
    """Rank r's vector: small signed integers from one seeded generator, the same every run."""
    rng = random.Random(seed)
    return [[rng.randint(-99, 99) for _ in range(elements)] for _ in range(ranks)]


# ---------------------------------------------------------------------------------------------
# The simulation
# ---------------------------------------------------------------------------------------------
def simulate_ring(inputs):
    """Run the two phases of the ring on `inputs` ([rank][element]) and record every step.

    Returns (final vectors, frames, bytes sent per rank, complete chunks after phase 1).
    A frame is the state of the ring after one step: what was sent, and for every rank and
    chunk the set of ranks whose numbers that copy of the chunk carries.
    """
    p, n = len(inputs), len(inputs[0])
    size = n // p
    # chunks[rank][j]: rank's copy of chunk j, as [values, ranks it carries]
    chunks = [
        [[vector[j * size : (j + 1) * size], {rank}] for j in range(p)]
        for rank, vector in enumerate(inputs)
    ]
    sent = [0] * p
    frames = [frame("start", 0, [], chunks, sent)]

    def step(phase, number, chunk_of, combine):
        # Every rank sends at once, so payloads are read before any rank updates its copy.
        sends = []
        for src in range(p):
            dst, j = (src + 1) % p, chunk_of(src)
            values, carried = chunks[src][j]
            sends.append((src, dst, j, list(values), set(carried)))
            sent[src] += size * ELEMENT_BYTES
        for _, dst, j, values, carried in sends:
            chunks[dst][j] = combine(chunks[dst][j], values, carried)
        frames.append(frame(phase, number, sends, chunks, sent))

    def add(mine, values, carried):
        return [[a + b for a, b in zip(mine[0], values, strict=True)], mine[1] | carried]

    def replace(mine, values, carried):
        return [values, carried]

    # Phase 1. Chunk j sets off from rank j, so after p-1 hops it is complete at rank j-1.
    for s in range(p - 1):
        step("reduce-scatter", s + 1, lambda src, s=s: (src - s) % p, add)
    after_reduce_scatter = [
        {"chunk": j, "owner": (j - 1) % p, "values": list(chunks[(j - 1) % p][j][0])}
        for j in range(p)
    ]
    # Phase 2. Rank r starts by passing on its complete chunk r+1, then forwards what arrives.
    for s in range(p - 1):
        step("all-gather", p + s, lambda src, s=s: (src + 1 - s) % p, replace)
    final = [[x for values, _ in row for x in values] for row in chunks]
    return final, frames, sent, after_reduce_scatter


def frame(phase, number, sends, chunks, sent):
    return {
        "phase": phase,
        "step": number,
        "sends": [
            {"src": src, "dst": dst, "chunk": j, "carries": sorted(carried)}
            for src, dst, j, _, carried in sends
        ],
        "holdings": [[sorted(carried) for _, carried in row] for row in chunks],
        "bytes_sent": list(sent),
    }


def ring_formula_bytes(p, tensor_bytes):
    """What the ring says each rank sends for an all_reduce of S bytes: 2(p-1)S/p, exactly."""
    return Fraction(2 * (p - 1), p) * tensor_bytes


# ---------------------------------------------------------------------------------------------
# The real thing: torch's all_reduce and reduce_scatter over gloo, on the same integers
# ---------------------------------------------------------------------------------------------
def rank_worker(rank, world_size, run_dir, inputs, timeout_s):
    """One rank: all_reduce its vector, reduce_scatter it, write both answers to a file."""
    import datetime

    import torch
    import torch.distributed as dist
    from launcher import file_store

    torch.set_num_threads(1)  # p ranks share a few cores; one thread each avoids thrashing
    dist.init_process_group(
        "gloo",
        init_method=file_store(run_dir),
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    try:
        mine = torch.tensor(inputs[rank], dtype=torch.int64)
        reduced = mine.clone()
        dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
        shard = torch.empty(len(inputs[rank]) // world_size, dtype=torch.int64)
        # torch 2.13 names it reduce_scatter_single; older releases, reduce_scatter_tensor.
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        scatter(shard, mine, op=dist.ReduceOp.SUM)
        answer = {
            "all_reduce": reduced.tolist(),
            "reduce_scatter": shard.tolist(),
            "tour": collectives_tour(rank, world_size, dist, torch, scatter),
        }
        with open(os.path.join(run_dir, f"rank{rank}.json"), "w") as file:
            json.dump(answer, file)
    finally:
        dist.destroy_process_group()


def tour_inputs(p):
    """The tour's buffers: chunk j of rank r holds 10 r + j (100 r + j past ten ranks)."""
    base = 10 if p <= 10 else 100
    return [[base * r + j for j in range(p)] for r in range(p)]


def collectives_tour(rank, p, dist, torch, reduce_scatter):
    """Every collective of chapter 2's table once, on small integers: what this rank passed
    and what it held afterwards, each as p slots, one per chunk (None: not in its tensor).

    A tensor of one chunk sits in the slot of its chunk index, this rank's own: what
    all_gather and gather take from rank r is its chunk r, and what reduce_scatter and
    scatter leave on rank r is chunk r. A rank that passes or gets no tensor has None.
    Roots (broadcast's and scatter's source, reduce's and gather's destination) are rank 0.
    """
    mine = tour_inputs(p)[rank]

    def buffer():
        return torch.tensor(mine, dtype=torch.int64)

    def one(value):
        return [value if j == rank else None for j in range(p)]

    def whole(tensors):
        return torch.cat(tensors).tolist()

    tour = {}
    t = buffer()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    tour["all_reduce"] = (mine, t.tolist())
    t = buffer()
    dist.broadcast(t, src=0)
    tour["broadcast"] = (mine, t.tolist())
    t = buffer()
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
    tour["reduce"] = (mine, t.tolist() if rank == 0 else None)  # off the root: unspecified
    own = torch.tensor([mine[rank]], dtype=torch.int64)
    parts = [torch.empty(1, dtype=torch.int64) for _ in range(p)]
    dist.all_gather(parts, own)
    tour["all_gather"] = (one(mine[rank]), whole(parts))
    shard = torch.empty(1, dtype=torch.int64)
    reduce_scatter(shard, buffer(), op=dist.ReduceOp.SUM)
    tour["reduce_scatter"] = (mine, one(shard.item()))
    t = torch.empty(p, dtype=torch.int64)
    dist.all_to_all_single(t, buffer())
    tour["all_to_all"] = (mine, t.tolist())
    parts = [torch.empty(1, dtype=torch.int64) for _ in range(p)] if rank == 0 else None
    dist.gather(own, gather_list=parts, dst=0)
    tour["gather"] = (one(mine[rank]), whole(parts) if rank == 0 else None)
    t = torch.empty(1, dtype=torch.int64)
    chunks = list(buffer().split(1)) if rank == 0 else None
    dist.scatter(t, scatter_list=chunks, src=0)
    tour["scatter"] = (mine if rank == 0 else None, one(t.item()))
    return {call: {"before": before, "after": after} for call, (before, after) in tour.items()}


def expected_tour(p):
    """What chapter 2's table says each rank holds after each call, worked out in plain Python."""
    x = tour_inputs(p)
    column = [sum(x[q][j] for q in range(p)) for j in range(p)]

    def one(r, value):
        return [value if j == r else None for j in range(p)]

    return {
        "all_reduce": [column for r in range(p)],
        "broadcast": [x[0] for r in range(p)],
        "reduce": [column if r == 0 else None for r in range(p)],
        "all_gather": [[x[q][q] for q in range(p)] for r in range(p)],
        "reduce_scatter": [one(r, column[r]) for r in range(p)],
        "all_to_all": [[x[q][r] for q in range(p)] for r in range(p)],
        "gather": [[x[q][q] for q in range(p)] if r == 0 else None for r in range(p)],
        "scatter": [one(r, x[0][r]) for r in range(p)],
    }


def real_collectives(inputs, timeout_s):
    """Every rank's answer from a real p-process gloo group, as [rank] lists."""
    # From code/, imported here rather than at the top: the simulation needs no file but this
    # one, and launcher imports torch only when it spawns.
    from launcher import spawn_ranks

    p = len(inputs)
    clock = time.perf_counter()
    with spawn_ranks(rank_worker, p, (inputs, timeout_s), "ring-allreduce-") as run_dir:
        answers = []
        for rank in range(p):
            with open(os.path.join(run_dir, f"rank{rank}.json")) as file:
                answers.append(json.load(file))
    return {
        "backend": "gloo",
        "world_size": p,
        "all_reduce": [answer["all_reduce"] for answer in answers],
        "reduce_scatter": [answer["reduce_scatter"] for answer in answers],
        # chapter 2's tour: per call, what every rank passed and held afterwards
        "tour": {
            call: {
                "root": None if call.startswith(("all_", "reduce_")) else 0,
                "before": [answer["tour"][call]["before"] for answer in answers],
                "after": [answer["tour"][call]["after"] for answer in answers],
            }
            for call in answers[0]["tour"]
        },
        "seconds": round(time.perf_counter() - clock, 3),
    }


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def print_steps(frames, p):
    print(f"{'step':>4}  {'phase':<14}  {'sends (rank>rank:chunk)':<{9 * p}}  sent/rank")
    for f in frames[1:]:
        sends = " ".join(f"r{s['src']}>r{s['dst']}:c{s['chunk']}" for s in f["sends"])
        print(f"{f['step']:>4}  {f['phase']:<14}  {sends:<{9 * p}}  {f['bytes_sent'][0]:>6} B")


def main(argv=None):
    args = parse_args(argv)
    p, n = args.ranks, args.elements
    inputs = make_inputs(p, n, args.seed)
    expected = [sum(column) for column in zip(*inputs, strict=True)]
    final, frames, sent, after_rs = simulate_ring(inputs)
    tensor_bytes = n * ELEMENT_BYTES
    formula = ring_formula_bytes(p, tensor_bytes)
    size = n // p
    checks = {
        "simulation_equals_direct_sum": all(row == expected for row in final),
        "reduce_scatter_completes_chunk_r+1_on_rank_r": all(
            done["values"] == expected[j * size : (j + 1) * size]
            and frames[p - 1]["holdings"][done["owner"]][j] == list(range(p))
            and done["owner"] == (j - 1) % p
            for j, done in enumerate(after_rs)
        ),
        "bytes_sent_equal_2(p-1)S/p": all(Fraction(b) == formula for b in sent),
    }
    real = None
    if not args.no_real:
        real = real_collectives(inputs, args.timeout)
        checks["real_all_reduce_equals_simulation"] = real["all_reduce"] == final
        checks["real_reduce_scatter_equals_simulation"] = real["reduce_scatter"] == [
            done["values"] for done in after_rs
        ]
        checks["real_collectives_leave_what_chapter_2_says"] = {
            call: entry["after"] for call, entry in real["tour"].items()
        } == expected_tour(p)

    print(
        f"Ring all_reduce, p = {p} ranks, {n} int64 elements each (S = {tensor_bytes} B), "
        f"{p} chunks of {size}"
    )
    print_steps(frames, p)
    print(f"bytes sent per rank: {sent[0]} B; the ring formula 2(p-1)S/p = {formula} B")
    if real is not None:
        print(f"real gloo collectives on {p} processes: {real['seconds']:.1f} s, start-up included")
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'}  {name}")

    verdict = "PASS" if all(checks.values()) else "FAIL"
    if args.json:
        from provenance import machine_facts  # imports torch: only when a file is wanted

        result = {
            "ranks": p,
            "elements": n,
            "element_bytes": ELEMENT_BYTES,
            "tensor_bytes": tensor_bytes,
            "chunk_elements": size,
            "inputs": inputs,
            "expected": expected,
            "simulated": final,
            "after_reduce_scatter": after_rs,
            "frames": frames,
            "bytes_sent": sent,
            "ring_formula_bytes": {
                "numerator": formula.numerator,
                "denominator": formula.denominator,
            },
            "real": real,
            "checks": checks,
            "verdict": verdict,
            "env": machine_facts(),
        }
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)
    if verdict != "PASS":
        sys.exit("ring simulation disagrees: " + ", ".join(k for k, v in checks.items() if not v))


if __name__ == "__main__":
    main()
