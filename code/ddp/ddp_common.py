"""What the module 26 DDP labs share: one copy for gloo on CPU and for NCCL on GPU.

The lab scripts, gloo.py and nccl.py, check their arguments with lab_cli.py
before torch is imported, then call in here. Nothing below knows the backend or the device
beyond the `device` and `sync` it is handed, so the same checks run on CPU tensors over TCP and
on CUDA tensors over NVLink.

Read it in the order a rank uses it:
  launching     the process group, over the store that launcher.py's ranks meet through
  checkpoints   named barriers in the store that say which rank is missing
  collectives   eight collectives checked against closed forms
  training      naive data parallelism and DDP behind one interface, one training loop
  experiment    the three variants, the reference and the control, the verdict, the report
  timing        all_reduce and memcpy bandwidth in nccl-tests' terms (algbw, busbw)
"""

import contextlib
import datetime
import functools
import json
import statistics
import time

import provenance  # code/, one folder up (the lab scripts put it on the path)
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler


# ---------------------------------------------------------------------------------------------
# Launching
# ---------------------------------------------------------------------------------------------
def start_process_group(backend, init_method, rank, world_size, timeout_s, phases, device_id=None):
    """Rendezvous, start the process group, and return the run's Checkpoints.

    With init_method "env://" the rank and world size come from torchrun's variables, and the
    ones passed here are ignored. The store found by the rendezvous carries the process group
    and, under another prefix, the checkpoints.
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    if init_method == "env://":
        rank, world_size = -1, -1
    store, rank, world_size = next(dist.rendezvous(init_method, rank, world_size, timeout=timeout))
    dist.init_process_group(
        backend,
        store=dist.PrefixStore("pg", store),
        rank=rank,
        world_size=world_size,
        timeout=timeout,
        device_id=device_id,
    )
    return Checkpoints(dist.PrefixStore("checkpoints", store), rank, world_size, timeout, phases)


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------
class Checkpoints:
    """Named barriers kept in the store: a timeout says which rank never arrived, and where.

    dist.monitored_barrier names a rank that is late, but barriers are anonymous: a rank that
    skipped a whole phase, barrier included, satisfies the barrier of the next phase, and the
    run goes on out of step. Here each phase has a name and each rank writes its arrival under
    that name, so nothing can be confused. `phases` lists the names in program order; it lets a
    rank that times out find the first phase some rank never reached, whichever rank it is.
    """

    def __init__(self, store, rank, world_size, timeout, phases):
        self.store, self.rank, self.world_size = store, rank, world_size
        self.timeout, self.phases = timeout, phases
        self.passed = {}  # phase -> time.time() when every rank had arrived

    def __call__(self, phase):
        if phase not in self.phases:
            raise ValueError(f"unknown phase {phase!r}; expected one of {self.phases}")
        self.store.set(f"{phase}/{self.rank}", "arrived")
        try:
            self.store.wait(self.keys(phase), self.timeout)
        except RuntimeError:  # the store's timeout (DistStoreError is a RuntimeError)
            raise RuntimeError(self.diagnose()) from None
        self.passed[phase] = time.time()

    def keys(self, phase):
        return [f"{phase}/{rank}" for rank in range(self.world_size)]

    def arrived(self, phase):
        return [r for r, key in enumerate(self.keys(phase)) if self.store.check([key])]

    def diagnose(self):
        seconds = self.timeout.total_seconds()
        for phase in self.phases:
            arrived = self.arrived(phase)
            if arrived and len(arrived) < self.world_size:
                missing = sorted(set(range(self.world_size)) - set(arrived))
                return (
                    f"{ranks(missing)} did not reach phase '{phase}' within {seconds:g} s"
                    f" ({ranks(arrived)} waited there)"
                )
        return f"a checkpoint timed out after {seconds:g} s"


def ranks(numbers):
    """'rank 1' or 'ranks 0, 2': how the messages name ranks."""
    return "rank" + "s" * (len(numbers) > 1) + " " + ", ".join(map(str, numbers))


# ---------------------------------------------------------------------------------------------
# Collectives against closed forms
# ---------------------------------------------------------------------------------------------
def newest(*names):
    """The first of these torch.distributed functions that this torch has, and its name.

    torch 2.13 renamed all_gather_into_tensor and reduce_scatter_tensor to all_gather_single and
    reduce_scatter_single and warns on the old names; torch 2.8 has only the old ones.
    """
    for name in names:
        if hasattr(dist, name):
            return getattr(dist, name), name
    raise AttributeError(f"torch.distributed has none of {names}")


def check_collectives(device):
    """Run eight collectives and compare each with its closed form; agree on the flags.

    Rank r contributes values built from r, so every expected result is a formula in the rank
    and the world size p. Returns ({name: ok on every rank, or None if it could not run},
    {role: API name that ran}).
    """
    rank, p = dist.get_rank(), dist.get_world_size()
    f64 = {"dtype": torch.float64, "device": device}
    all_gather, all_gather_name = newest("all_gather_single", "all_gather_into_tensor")
    reduce_scatter, reduce_scatter_name = newest("reduce_scatter_single", "reduce_scatter_tensor")
    ok = {}

    x = torch.full((3,), rank + 1.0, **f64)
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    ok["all_reduce_sum"] = torch.equal(x, torch.full((3,), p * (p + 1) / 2, **f64))

    x = torch.full((3,), rank + 1.0, **f64)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    ok["all_reduce_avg"] = torch.equal(x, torch.full((3,), (p + 1) / 2, **f64))

    x = torch.tensor([rank + 1.0, -(rank + 1.0)], **f64)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    ok["all_reduce_max"] = torch.equal(x, torch.tensor([p, -1.0], **f64))

    # all_gather: rank r contributes [r, r*r]; everyone receives all of them, in rank order.
    out = torch.empty(2 * p, **f64)
    all_gather(out, torch.tensor([rank, rank * rank], **f64))
    expected = torch.tensor([v for q in range(p) for v in (q, q * q)], **f64)
    ok["all_gather"] = torch.equal(out, expected)

    # reduce_scatter: rank r holds (r+1)*(j+1) at position j; rank r keeps the sums of chunk r.
    positions = torch.arange(1, 2 * p + 1, **f64)
    out = torch.empty(2, **f64)
    reduce_scatter(out, (rank + 1) * positions, op=dist.ReduceOp.SUM)
    ok["reduce_scatter"] = torch.equal(out, p * (p + 1) / 2 * positions[2 * rank : 2 * rank + 2])

    # broadcast from the last rank, to show that the source need not be rank 0
    x = torch.full((2,), float(rank), **f64)
    dist.broadcast(x, src=p - 1)
    ok["broadcast"] = torch.equal(x, torch.full((2,), p - 1.0, **f64))

    # all_to_all_single with unequal splits: rank r sends j+1 copies of 10r+j to rank j, so
    # rank r receives r+1 copies of 10q+r from every rank q (MoE token dispatch in miniature).
    sent = torch.cat([torch.full((j + 1,), 10.0 * rank + j, **f64) for j in range(p)])
    got = torch.empty(p * (rank + 1), **f64)
    dist.all_to_all_single(got, sent, [rank + 1] * p, [j + 1 for j in range(p)])
    expected = torch.cat([torch.full((rank + 1,), 10.0 * q + rank, **f64) for q in range(p)])
    ok["all_to_all_single"] = torch.equal(got, expected)

    # a ring of point-to-point messages: send to the right, receive from the left. Batched, so
    # every rank can post its send before its receive without a deadlock (NCCL needs this).
    # A single rank has no neighbour (gloo cannot connect a rank to itself): None, not run.
    ok["send_recv_ring"] = None
    if p > 1:
        right, left = (rank + 1) % p, (rank - 1) % p
        inbox = torch.empty(2, **f64)
        ops = [
            dist.P2POp(dist.isend, torch.full((2,), float(rank), **f64), right),
            dist.P2POp(dist.irecv, inbox, left),
        ]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        ok["send_recv_ring"] = torch.equal(inbox, torch.full((2,), float(left), **f64))

    # AND the flags across ranks: the MIN of 0/1 values is 1 only if every rank saw a match.
    ran = [name for name, flag in ok.items() if flag is not None]
    flags = torch.tensor([int(ok[name]) for name in ran], dtype=torch.int32, device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    ok.update({name: bool(flag) for name, flag in zip(ran, flags.tolist(), strict=True)})
    return ok, {"all_gather": all_gather_name, "reduce_scatter": reduce_scatter_name}


def reduce_scatter_avg_behaviour(device):
    """What reduce_scatter with ReduceOp.AVG does on this backend: 'averages' or 'sums'.

    Rank r contributes r+1 everywhere, so an average is (p+1)/2 and a sum is p(p+1)/2. The notes
    saw gloo sum in torch 2.8; this measures the installed torch instead of trusting either.
    """
    rank, p = dist.get_rank(), dist.get_world_size()
    reduce_scatter, _ = newest("reduce_scatter_single", "reduce_scatter_tensor")
    out = torch.empty(1, dtype=torch.float64, device=device)
    try:
        reduce_scatter(
            out,
            torch.full((p,), rank + 1.0, dtype=torch.float64, device=device),
            op=dist.ReduceOp.AVG,
        )
    except (RuntimeError, ValueError) as err:  # a backend may refuse AVG outright
        return f"refused ({type(err).__name__})", None
    value = out.item()
    if p == 1:
        return "cannot tell at world size 1", value
    if value == (p + 1) / 2:
        return "averages", value
    if value == p * (p + 1) / 2:
        return "sums", value
    return "neither averages nor sums", value


def avg_beyond_all_reduce(device):
    """ReduceOp.AVG where the pages warn about it: reduce, and an integer tensor.

    Rank r contributes r+1. Returns, as rank 0 saw it: the value reduce(dst=0) left on rank 0
    (the mean would be (p+1)/2), what reduce(dst=p-1) left in rank 0's own input (it gave 1),
    and how an integer all_reduce with AVG ends ("raises TypeName" or the value).
    """
    rank, p = dist.get_rank(), dist.get_world_size()

    def reduce_avg(dst):
        x = torch.full((1,), rank + 1.0, dtype=torch.float64, device=device)
        dist.reduce(x, dst=dst, op=dist.ReduceOp.AVG)
        return x.item()

    integer = torch.full((1,), rank + 1, dtype=torch.int64, device=device)
    try:
        dist.all_reduce(integer, op=dist.ReduceOp.AVG)
        integer_avg = f"{integer.item()}"
    except (RuntimeError, ValueError) as err:  # on gloo the division's float result
        integer_avg = f"raises {type(err).__name__}"  # cannot be written back into int64
    return {
        "reduce_avg_on_dst": reduce_avg(0),
        "reduce_avg_input_left_on_others": reduce_avg(p - 1) if p > 1 else None,
        "integer_all_reduce_avg": integer_avg,
    }


# ---------------------------------------------------------------------------------------------
# Training: one loop, three ways to keep replicas in step
# ---------------------------------------------------------------------------------------------
SAMPLES = 16  # the whole data set; each step every rank takes its DistributedSampler shard
FEATURES = 8
LR = 0.1
MOMENTUM = 0.9


def make_data(device):
    """A fixed regression problem, the same on every rank (a generator seeded once)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=gen, dtype=torch.float64)
    noise = torch.randn(SAMPLES, 1, generator=gen, dtype=torch.float64)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.1 * noise
    return x.to(device), y.to(device)


def make_model(seed, device):
    """Linear(8,16)-Tanh-Linear(16,1) in float64, initialised from `seed`.

    float64 keeps the comparison about algebra: in float32 a different summation order alone
    moves the result by about 1e-7.
    """
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))
    return model.to(dtype=torch.float64, device=device)


def shard(world_size, rank, step):
    """The sample indices rank `rank` trains on at `step` (one epoch per step).

    DistributedSampler pads by repeating indices when the data does not divide evenly, so
    every rank gets the same count: equal shards are what makes the average of the per-rank
    mean losses equal the mean over the (padded) global batch.
    """
    sampler = DistributedSampler(range(SAMPLES), num_replicas=world_size, rank=rank, seed=0)
    sampler.set_epoch(step)  # without it, every epoch would replay the same order
    return list(sampler)


def global_batch(world_size, step):
    """Every rank's shard at `step`, padding included: the batch a single process would see."""
    return [i for rank in range(world_size) for i in shard(world_size, rank, step)]


class Local:
    """A plain module behind the data-parallel interface: no communication at all."""

    def __init__(self, module):
        self.module = module

    def __call__(self, x):
        return self.module(x)

    def no_sync(self):
        return contextlib.nullcontext()

    def sync_gradients(self):
        """Nothing to do: there are no other replicas."""


class NaiveDataParallel(Local):
    """Data parallelism by hand: one broadcast at the start, one all_reduce per gradient."""

    def __init__(self, module):
        super().__init__(module)
        self.require_sync = True
        # Ranks were seeded differently on purpose: only this copy makes the replicas agree.
        for param in module.parameters():
            dist.broadcast(param.detach(), src=0)

    @contextlib.contextmanager
    def no_sync(self):
        before = self.require_sync
        self.require_sync = False
        try:
            yield
        finally:
            self.require_sync = before

    def sync_gradients(self):
        if not self.require_sync:
            return
        world_size = dist.get_world_size()
        for param in self.module.parameters():
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
            # The sum of p per-rank mean gradients, divided by p: the mean over the global batch.
            param.grad.div_(world_size)


class TorchDDP(Local):
    """torch's DistributedDataParallel behind the same interface."""

    def __init__(self, module):
        super().__init__(module)
        # On a GPU, DDP(model, device_ids=[local_rank]); on CPU there are no device ids.
        device = next(module.parameters()).device
        device_ids = [device.index] if device.type == "cuda" else None
        self.ddp = DistributedDataParallel(module, device_ids=device_ids)

    def __call__(self, x):
        return self.ddp(x)

    def no_sync(self):
        return self.ddp.no_sync()

    def sync_gradients(self):
        """Nothing to do: DDP's Reducer averaged the gradients before backward() returned."""

    def bucket_bytes(self):
        """Bytes per gradient bucket, from DDP's own logging data (a prototype API)."""
        sizes = self.ddp._get_ddp_logging_data()["bucket_sizes"]
        return [int(size) for size in str(sizes).split(",") if size.strip()]


def train(dp, data, indices_at, steps, micro_batches=1):
    """The one training loop: SGD with momentum on indices_at(step), in micro-batches.

    Each micro-batch's loss is its summed error over the size of the whole step's batch, so the
    micro-batch gradients add up to the gradient of the batch mean. Every backward but the last
    runs under no_sync(): gradients accumulate locally and are averaged across ranks once.
    Returns the trained parameters as one flat tensor.
    """
    x, y = data
    optimizer = torch.optim.SGD(dp.module.parameters(), lr=LR, momentum=MOMENTUM)
    for step in range(steps):
        idx = torch.tensor(indices_at(step), device=x.device)
        pieces = list(
            zip(x[idx].tensor_split(micro_batches), y[idx].tensor_split(micro_batches), strict=True)
        )
        for i, (xb, yb) in enumerate(pieces):
            last = i == len(pieces) - 1
            with contextlib.nullcontext() if last else dp.no_sync():
                loss = F.mse_loss(dp(xb), yb, reduction="sum") / len(idx)
                loss.backward()
                dp.sync_gradients()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return flat_parameters(dp.module)


def flat_parameters(module):
    return torch.cat([param.detach().reshape(-1) for param in module.parameters()])


def replicas_identical(flat):
    """True when every rank holds bit-for-bit the same parameters (all-gathered, compared)."""
    all_gather, _ = newest("all_gather_single", "all_gather_into_tensor")
    # The concatenated form (p*n,) works on every backend; gloo refuses the stacked (p, n).
    everyone = flat.new_empty(dist.get_world_size() * flat.numel())
    all_gather(everyone, flat)
    rows = everyone.view(dist.get_world_size(), -1)
    return all(torch.equal(row, rows[0]) for row in rows)


def max_abs_diff(a, b):
    return (a - b).abs().max().item()


# ---------------------------------------------------------------------------------------------
# The experiment both labs run, and its verdict
# ---------------------------------------------------------------------------------------------
SEED = 1234  # rank r initialises its model from SEED + r: different on purpose
VARIANTS = {  # name: (wrapper, micro-batches per step, label in the report)
    "naive": (NaiveDataParallel, 1, "naive: broadcast, all_reduce / p"),
    "ddp": (TorchDDP, 1, "DistributedDataParallel"),
    "ddp_no_sync": (TorchDDP, 2, "DDP, no_sync over 2 micro-batches"),
}
# Every variant must match the reference to float64 rounding: the differences are a few units
# in the last place of O(1) parameters (about 1e-16), so 1e-12 leaves room for summation order
# and still fails a trainer that is off by anything real.
VARIANT_MAX = 1e-12
CONTROL_MIN = 1e-3  # and the control must miss it by more than this


def train_variants(rank, world_size, device, steps, checkpoint):
    """Every rank: the three variants, one after another, each from this rank's own seed.

    Returns ({variant: trained parameters, flat}, DDP's gradient bucket sizes in bytes).
    """
    data = make_data(device)
    my_shard = functools.partial(shard, world_size, rank)  # step -> this rank's indices
    params, bucket_bytes = {}, []
    for name, (wrapper, micro_batches, _) in VARIANTS.items():
        checkpoint(name)
        dp = wrapper(make_model(SEED + rank, device))
        params[name] = train(dp, data, my_shard, steps, micro_batches)
        if name == "ddp":
            bucket_bytes = dp.bucket_bytes()
    return params, bucket_bytes


def reference_and_control(world_size, steps, device):
    """Rank 0 alone: the single-process reference and the negative control, flattened.

    Both start from rank 0's initialisation, which the broadcast gives every replica. The
    reference takes every rank's shard at once (the full batch, padding included); the
    control takes rank 0's shard alone and never communicates.
    """
    data = make_data(device)
    everyone = functools.partial(global_batch, world_size)
    rank_0 = functools.partial(shard, world_size, 0)
    reference = train(Local(make_model(SEED, device)), data, everyone, steps)
    control = train(Local(make_model(SEED, device)), data, rank_0, steps)
    return reference, control


def judge(params, replicas, reference, control):
    """The comparison with the reference, as the JSON records it."""
    variants = {
        name: {
            "max_abs_diff": max_abs_diff(flat, reference),
            "replicas_identical": replicas.get(name),
        }
        for name, flat in params.items()
    }
    return {
        "variants": variants,
        "control_max_abs_diff": max_abs_diff(control, reference),
        "thresholds": {"variant_max": VARIANT_MAX, "control_min": CONTROL_MIN},
        "replicas_identical": bool(replicas) and all(replicas.values()),
    }


def summary(name, backend, start_method, m, reference, control, args):
    """The keys every lab's JSON starts with, from the run's settings and what it measured.

    `m` is what the lab measured on rank 0; the lab adds its own keys, then calls conclude().
    """
    world_size = args.world_size
    per_rank = len(shard(world_size, 0, 0))
    behaviour, value = m["reduce_scatter_avg"]
    return {
        "lab": name,
        "backend": backend,
        "launcher": "torchrun" if args.torchrun else "mp.spawn",
        "start_method": None if args.torchrun else start_method,
        "world_size": world_size,
        "steps": args.steps,
        "timeout_s": args.timeout,
        "samples": SAMPLES,
        "per_rank": per_rank,
        "padded": per_rank * world_size - SAMPLES,
        "collectives": m["collectives"],
        "collectives_ok": all(ok is not False for ok in m["collectives"].values()),
        "api": m["api"],
        "reduce_scatter_avg_behaviour": behaviour,
        "reduce_scatter_avg_value": value,
        "avg_beyond_all_reduce": m["avg_beyond_all_reduce"],
        **judge(m["params"], m["replicas"], reference, control),
        "ddp_buckets": len(m["ddp_bucket_bytes"]),
        "ddp_bucket_bytes": m["ddp_bucket_bytes"],
        "allreduce_4mib": m["allreduce_4mib"],
        "memcpy_4mib": m["memcpy_4mib"],
        "busbw_over_memcpy": m["allreduce_4mib"]["busbw_GBps"] / m["memcpy_4mib"]["GBps"],
    }


def conclude(r, passed, started):
    """The keys every lab's JSON ends with: when each phase was passed, what failed, the verdict.

    `passed` maps phase -> time.time() when every rank had arrived; `started` is the script's.
    """
    r["timeline_s"] = {phase: at - started for phase, at in passed.items()}
    r["failures"] = failures(r)
    r["verdict"] = "FAIL" if r["failures"] else "PASS"
    return r


def failures(r):
    """What a run's results get wrong, in words; an empty list is a PASS."""
    found = [f"collective {name}" for name, ok in r["collectives"].items() if ok is False]
    for name, v in r["variants"].items():
        if not v["max_abs_diff"] <= VARIANT_MAX:
            found.append(f"{name} is {v['max_abs_diff']:.1e} from the reference")
        if not v["replicas_identical"]:
            found.append(f"{name} replicas differ")
    # With one rank the control's shard is the whole batch: it is the reference, by design.
    if r["world_size"] > 1 and not r["control_max_abs_diff"] > CONTROL_MIN:
        found.append(f"the control is within {CONTROL_MIN:g} of the reference: no teeth")
    if r["ddp_buckets"] < 1:
        found.append("DDP reported no gradient bucket")
    return found


def correctness_lines(r):
    """The report's first part, the same for both labs: collectives, then the table."""
    ran = [ok for ok in r["collectives"].values() if ok is not None]
    not_run = [name for name, ok in r["collectives"].items() if ok is None]
    lines = [
        f"collectives: {sum(ran)} of {len(ran)} match their closed forms"
        f" ({r['api']['all_gather']}, {r['api']['reduce_scatter']})"
        + (f"; not run with one rank: {', '.join(not_run)}" if not_run else ""),
        f"reduce_scatter with ReduceOp.AVG: {r['reduce_scatter_avg_behaviour']}"
        f" (ranks gave 1..{r['world_size']}, rank 0 got {r['reduce_scatter_avg_value']:g})",
        *avg_lines(r["avg_beyond_all_reduce"]),
        "",
        f"{'training run':<36}{'max |param - reference|':>25}  replicas",
    ]
    for name, (_, _, label) in VARIANTS.items():
        v = r["variants"][name]
        same = "identical" if v["replicas_identical"] else "DIFFER"
        lines.append(f"{label:<36}{v['max_abs_diff']:>25.1e}  {same}")
    lines.append(f"{'control: rank 0 alone, no comm':<36}{r['control_max_abs_diff']:>25.1e}  -")
    sizes = ", ".join(map(str, r["ddp_bucket_bytes"]))
    lines += ["", f"DDP gradient buckets: {r['ddp_buckets']} ({sizes} bytes)"]
    return lines


def avg_lines(avg):
    others = avg["reduce_avg_input_left_on_others"]
    left = "" if others is None else f"; with dst p-1, rank 0's input 1 came back as {others:g}"
    return [
        f"reduce with ReduceOp.AVG: rank 0 (dst) got {avg['reduce_avg_on_dst']:g}{left}",
        f"all_reduce with ReduceOp.AVG on int64: {avg['integer_all_reduce_avg']}",
    ]


def verdict_line(r):
    if r["failures"]:
        return "verdict: FAIL - " + "; ".join(r["failures"])
    if r["world_size"] == 1:
        return "verdict: PASS - with one rank every variant is the reference itself"
    return (
        f"verdict: PASS - all three match full-batch training within {VARIANT_MAX:g},"
        f" replicas are bit-identical, the control is {r['control_max_abs_diff']:.2g} away"
    )


def publish(r, report, json_path):
    """Rank 0's last act: print the report, write the JSON if asked, and fail if a check did."""
    print(report, flush=True)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as out:
            json.dump({**r, "env": provenance.machine_facts()}, out, indent=2)
            out.write("\n")
    if r["failures"]:
        raise RuntimeError("checks failed: " + "; ".join(r["failures"]))


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------
MiB = 1 << 20


def median_seconds(fn, sync, warmup=2, reps=7, iters=1):
    """Median over `reps` timed rounds of the time per fn() call, after `warmup` calls.

    Each round makes `iters` back-to-back calls and divides, as nccl-tests does, so that a
    short operation is not drowned by the cost of launching it. `sync` waits for the device (a
    no-op on CPU, torch.cuda.synchronize on GPU): the clock stops when the work is done, not
    when it was queued.
    """
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        times.append((time.perf_counter() - start) / iters)
    return statistics.median(times)


def bandwidth(nbytes, seconds, world_size):
    """nccl-tests' figures: algbw = S/t, busbw = algbw * 2(p-1)/p, in GB/s (1e9 bytes)."""
    algbw = nbytes / seconds / 1e9
    return {
        "bytes": nbytes,
        "seconds": seconds,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * 2 * (world_size - 1) / world_size,
    }


def time_all_reduce(nbytes, device, sync, dtype=torch.float32, warmup=2, reps=7, iters=1):
    """all_reduce of nbytes: the slowest rank's median time, with algbw and busbw."""
    # Zeros: one buffer is reduced in place call after call, and a sum of zeros stays zero.
    # Ones would grow p-fold a call, and reach inf after 128 calls in float32 at p = 2.
    x = torch.zeros(nbytes // itemsize(dtype), dtype=dtype, device=device)
    dist.barrier()  # start together; after that each all_reduce keeps the ranks in step
    seconds = median_seconds(lambda: dist.all_reduce(x), sync, warmup, reps, iters)
    return bandwidth(nbytes, slowest_rank(seconds, device), dist.get_world_size())


def slowest_rank(seconds, device):
    """The largest of every rank's `seconds`: a collective is as fast as its slowest rank."""
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()


def time_memcpy(nbytes, device, sync, warmup=2, reps=7, iters=1):
    """One tensor copied into another (copy_): the ceiling the sweep compares busbw with.

    The convention, stated once and used everywhere: GBps counts each byte copied once,
    nbytes / seconds, as busbw counts each byte a rank sends once. (STREAM's copy counts
    bytes read plus bytes written, twice as many.) So at p = 2, where busbw = algbw, an
    all_reduce that takes as long as the copy of its buffer has the copy's GBps as busbw.
    """
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), sync, warmup, reps, iters)
    return {
        "bytes": nbytes,
        "seconds": seconds,
        "GBps": nbytes / seconds / 1e9,
        "convention": "bytes copied, each counted once, as busbw counts bytes sent",
    }


def sweep_sizes(smallest, largest):
    """Sizes from smallest to largest in powers of 4 (4 KiB, 16 KiB, ... as nccl-tests -f 4)."""
    sizes = [smallest]
    while sizes[-1] * 4 <= largest:
        sizes.append(sizes[-1] * 4)
    return sizes


def format_bytes(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"
