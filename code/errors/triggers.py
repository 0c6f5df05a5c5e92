"""The mistakes behind the error index, each made once: one function per error.

Each public function is named after its entry on the site (`default_pg_not_initialized` is the entry
`default-pg-not-initialized`) and takes `tmp`, an empty folder that is removed when it returns.
It makes the mistake the way people make it, and then either torch raises its exception here,
or, where the error only exists across processes (a rank killed by a signal, a launcher's own
report, a start method that re-imports `__main__`), the function runs the child that fails
and returns the lines of its output that carry the error. reproduce.py runs them.

Everything runs on a CPU with gloo and talks to 127.0.0.1 only. A function that opens a
process group or a store closes it again, whatever happens.
"""

import argparse
import contextlib
import functools
import io
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from datetime import timedelta
from multiprocessing.reduction import ForkingPickler

import torch
import torch._dynamo  # DDP imports it on first use; after a group exists it hangs on at exit
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset

# What torchrun sets and env:// reads: a child must not inherit the caller's.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


# ---------------------------------------------------------------------------------------------
# Helpers: a one-rank group, a free port, a child process
# ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _one_rank_group(tmp, backend="gloo"):
    """A process group of world size 1 over a file in `tmp`: enough for DDP's reducer, which
    keeps the same books whatever the world size. Destroyed on the way out, error or not."""
    try:
        dist.init_process_group(backend, init_method=f"file://{tmp}/store", rank=0, world_size=1)
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:  # the kernel picks; closed before torch binds it
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(tmp, script, *python_args, mark=None, keep=1, inline=False):
    """Run `script` in a fresh Python, after `python_args` (such as `-m torch.distributed.run`),
    from a file in `tmp` or, `inline`, as `python -c`. Return `keep` lines of its output from
    the first that contains `mark`, or its last line."""
    path = os.path.join(tmp, "train.py")
    with open(path, "w") as file:
        file.write(textwrap.dedent(script))
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["OMP_NUM_THREADS"] = "1"  # torchrun warns when it has to choose
    program = ["-c", textwrap.dedent(script)] if inline else [path]
    command = [sys.executable, *python_args, *program]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp, env=env)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    found = [i for i, line in enumerate(lines) if mark is None or mark in line]
    if not found:
        raise RuntimeError(f"no line with {mark!r}; the child's last lines: {lines[-5:]}")
    first = found[0] if mark else found[-1]
    return "\n".join(line.strip() for line in lines[first : first + keep])


def _torchrun():
    """torchrun, one rank, on a free loopback port: no host name to look up."""
    port = f"--master-port={_free_port()}"
    return ("-m", "torch.distributed.run", "--nproc-per-node=1", "--master-addr=127.0.0.1", port)


# A rank that dies by SIGKILL, as the kernel's out-of-memory killer ends one: same signal, no
# traceback from the victim. One torchrun run shows three entries' lines; it runs once.
@functools.cache
def _torchrun_with_a_killed_rank():
    script = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    with tempfile.TemporaryDirectory(prefix="ddp-error-") as tmp:
        return _child(tmp, script, *_torchrun(), mark="failed (exitcode", keep=40)


def _line_with(text, mark):
    return next(line.strip() for line in text.splitlines() if mark in line)


# ---------------------------------------------------------------------------------------------
# Launching and rendezvous
# ---------------------------------------------------------------------------------------------
def env_rendezvous_var_not_set(tmp):
    # A torchrun script started with plain `python`: env:// finds no RANK.
    saved = {name: os.environ.pop(name) for name in LAUNCH_VARS if name in os.environ}
    try:
        dist.init_process_group("gloo", init_method="env://")
    finally:
        os.environ.update(saved)
        if dist.is_initialized():
            dist.destroy_process_group()


def default_pg_not_initialized(tmp):
    # A collective (or get_rank(), or a DistributedSampler) before init_process_group.
    dist.all_reduce(torch.ones(1))


def pg_initialized_twice(tmp):
    # The script, or a library it calls, opens the default group a second time.
    with _one_rank_group(tmp):
        dist.init_process_group("gloo", init_method=f"file://{tmp}/again", rank=0, world_size=1)


def local_rank_unrecognized(tmp):
    # torch.distributed.launch passes --local-rank=0 (dashed since 2.0) to a script whose
    # parser only knows --local_rank.
    script = """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.parse_args()
    """
    launch = ("-m", "torch.distributed.launch", "--nproc-per-node=1")
    port = ("--master-addr=127.0.0.1", f"--master-port={_free_port()}")
    return _child(tmp, script, *launch, *port, mark="unrecognized arguments")


def child_failed_error(tmp):
    # Any rank that fails: torchrun's summary names the first one, and how it ended.
    lines = _torchrun_with_a_killed_rank().splitlines()
    first = next(i for i, line in enumerate(lines) if "errors.ChildFailedError:" in line)
    summary = lines[first:]
    return "\n".join(summary[: summary.index("Root Cause (first observed failure):") + 8])


def signal_exception_sighup(tmp):
    # The terminal that started torchrun goes away (an ssh session drops) and the agent gets
    # SIGHUP; here the rank sends it to its parent, the agent.
    script = """
        import os, signal, time
        os.kill(os.getppid(), signal.SIGHUP)
        time.sleep(30)
    """
    return _child(tmp, script, *_torchrun(), mark="SignalException:")


def rendezvous_timeout(tmp):
    # torchrun --nnodes=2 with the second node never started: the join times out.
    params = RendezvousParameters(
        backend="c10d",
        endpoint=f"127.0.0.1:{_free_port()}",
        run_id="job",
        min_nodes=2,
        max_nodes=2,
        join_timeout="2",
        is_host="true",
    )
    backend, store = create_backend(params)
    handler = create_handler(store, backend, params)
    try:
        handler.next_rendezvous()
    finally:
        handler.shutdown()


# ---------------------------------------------------------------------------------------------
# Stores and ports
# ---------------------------------------------------------------------------------------------
def server_socket_addr_in_use(tmp):
    # Two jobs on one machine with the same MASTER_PORT: the second store cannot listen.
    port = _free_port()
    first = dist.TCPStore("127.0.0.1", port, 1, True)
    try:
        dist.TCPStore("127.0.0.1", port, 1, True)
    finally:
        del first


def store_clients_timeout(tmp):
    # Rank 0 hosts the store of a world of 2, and rank 1 never comes.
    dist.TCPStore("127.0.0.1", _free_port(), 2, True, timeout=timedelta(seconds=1))


def client_socket_timeout(tmp):
    # A rank connects to MASTER_ADDR:MASTER_PORT and nothing listens there.
    dist.TCPStore("127.0.0.1", _free_port(), 2, False, timeout=timedelta(seconds=1))


def store_wait_timeout(tmp):
    # A store get() of a key that no other rank ever sets.
    store = dist.TCPStore("127.0.0.1", _free_port(), 1, True, timeout=timedelta(seconds=1))
    try:
        store.get("missing")
    finally:
        del store


# ---------------------------------------------------------------------------------------------
# Devices and NCCL
# ---------------------------------------------------------------------------------------------
def nccl_no_gpus(tmp):
    # An NCCL group on a machine without a GPU. Since 2.15, "nccl" means a new engine that
    # says so in other words; "nccl-legacy" is the ProcessGroupNCCL that the threads show.
    legacy = hasattr(dist.distributed_c10d, "_register_builtin_nccl_legacy_backend")
    with _one_rank_group(tmp, "nccl-legacy" if legacy else "nccl"):
        pass


def no_backend_for_device_cpu(tmp):
    # A group with a backend for CUDA tensors only (as "nccl" alone is), given a CPU tensor.
    with _one_rank_group(tmp, "cuda:gloo"):
        dist.all_reduce(torch.ones(2))


def ddp_device_ids_cpu_module(tmp):
    # device_ids names the one GPU a module lives on; a CPU module takes None.
    with _one_rank_group(tmp):
        DDP(nn.Linear(4, 2), device_ids=[0])


def ddp_device_ids_single(tmp):
    # One process drives one device: a list of several is refused.
    with _one_rank_group(tmp):
        DDP(nn.Linear(4, 2), device_ids=[0, 1])


def cuda_fork_reinit(tmp):
    # The parent touches CUDA, then forks a worker that uses CUDA too. In a child Python:
    # forking this process, threads and all, is what the error is about.
    script = """
        import os, traceback, torch
        try:
            torch.cuda.init()  # the parent's first CUDA call (here it finds no driver)
        except Exception:
            pass
        if os.fork() == 0:  # a fork-started worker, as a DataLoader or mp.Pool starts one
            try:
                torch.cuda.init()
            except Exception:
                traceback.print_exc()
            os._exit(0)
        os.wait()
    """
    return _child(tmp, script)  # the traceback's last line


# ---------------------------------------------------------------------------------------------
# DDP's reducer
# ---------------------------------------------------------------------------------------------
class TwoHeads(nn.Module):
    # `unused` is registered but forward never calls it: DDP waits for its gradient.
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.used(x)


def unused_params_prior_reduction(tmp):
    with _one_rank_group(tmp):
        model = DDP(TwoHeads())  # find_unused_parameters=False, the default
        x = torch.randn(2, 4)
        model(x).sum().backward()
        model(x)  # the next forward finds the last reduction unfinished


class SharedCheckpointed(nn.Module):
    # One layer inside two reentrant checkpoints: its gradient hook fires once per
    # reentrant backward, twice in one iteration. `stem` runs first, outside them, so its
    # gradient comes last and keeps the iteration open while the second one arrives.
    def __init__(self):
        super().__init__()
        self.stem, self.block = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        x = checkpoint(self.block, self.stem(x), use_reentrant=True)
        return checkpoint(self.block, x, use_reentrant=True)


def marked_ready_twice(tmp):
    with _one_rank_group(tmp):
        model = DDP(SharedCheckpointed())
        model(torch.randn(2, 4, requires_grad=True)).sum().backward()


class Switch(nn.Module):
    # The second layer is skipped in the first iteration only: the graph changes.
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, use_b):
        x = self.a(x)
        return self.b(x) if use_b else x


def static_graph_changed(tmp):
    with _one_rank_group(tmp):
        model = DDP(Switch(), static_graph=True)
        x = torch.randn(2, 4)
        model(x, False).sum().backward()  # iteration 1: DDP records `b` as unused
        model(x, True).sum().backward()  # iteration 2: `b` used after all


def ddp_inplace_buffer(tmp):
    # A tensor that backward needs, changed in place after forward saved it. The threads met
    # it under DDP, in its buffer broadcast; on 2.13 to 2.15 that broadcast no longer trips
    # it (docs/errors/ddp.md says so). The check is autograd's, DDP or not.
    x = torch.randn(3, requires_grad=True)
    y = x.sigmoid()  # sigmoid's backward reads its output
    y.mul_(2)  # ... which this changes
    y.sum().backward()


def ddp_no_grad_params(tmp):
    with _one_rank_group(tmp):
        DDP(nn.Linear(4, 4).requires_grad_(False))  # a frozen feature extractor


# ---------------------------------------------------------------------------------------------
# torch.compile
# ---------------------------------------------------------------------------------------------
def ddpoptimizer_graph_break(tmp):
    # Not an exception: the reason Dynamo gives for each split DDPOptimizer makes at a bucket
    # boundary, as graph-break reports print it. The "eager" explain backend collects the
    # reasons without a C++ compiler.
    from torch._dynamo.backends.debugging import ExplainWithBackend

    with _one_rank_group(tmp):
        try:
            # four 1 MiB layers and 1 MiB buckets: a bucket, and so a graph, per layer
            net = nn.Sequential(*[nn.Linear(512, 512, bias=False) for _ in range(4)])
            explain = ExplainWithBackend("eager")
            DDP(torch.compile(net, backend=explain), bucket_cap_mb=1)(torch.randn(2, 512))
            return _line_with(str(explain.output()), "DDPOptimizer")
        finally:
            torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------
# Checkpoints and state dicts
# ---------------------------------------------------------------------------------------------
def orig_mod_unexpected(tmp):
    # A compiled model's state_dict carries `_orig_mod.`; no compiling is needed to see it.
    path = os.path.join(tmp, "ckpt.pt")
    torch.save(torch.compile(nn.Linear(4, 2)).state_dict(), path)
    nn.Linear(4, 2).load_state_dict(torch.load(path))


def module_prefix_unexpected(tmp):
    # Saved from the DDP wrapper (keys `module.*`), loaded into the bare model.
    path = os.path.join(tmp, "ckpt.pt")
    with _one_rank_group(tmp):
        torch.save(DDP(nn.Linear(4, 2)).state_dict(), path)
    nn.Linear(4, 2).load_state_dict(torch.load(path))


def module_prefix_missing(tmp):
    # Saved from the bare model, loaded into the DDP wrapper, which wants `module.*`.
    path = os.path.join(tmp, "ckpt.pt")
    torch.save(nn.Linear(4, 2).state_dict(), path)
    with _one_rank_group(tmp):
        DDP(nn.Linear(4, 2)).load_state_dict(torch.load(path))


def cuda_deserialize_cpu(tmp):
    # A checkpoint saved on a GPU, loaded without map_location on a machine without one. Made
    # here from a CPU save whose storages' location tag is rewritten from "cpu" to "cuda:0".
    saved = io.BytesIO()
    torch.save({"weight": torch.ones(2)}, saved)
    path = os.path.join(tmp, "gpu_ckpt.pt")
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/data.pkl"):  # BINUNICODE: 'X', 4-byte length, text
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            dst.writestr(info, data)
    torch.load(path)


def weights_only_load_failed(tmp):
    # The argparse Namespace saved beside the weights; since 2.6 torch.load loads weights only.
    path = os.path.join(tmp, "ckpt.pt")
    args = argparse.Namespace(lr=0.1, epochs=3)
    torch.save({"model": nn.Linear(4, 2).state_dict(), "args": args}, path)
    torch.load(path)


# ---------------------------------------------------------------------------------------------
# Processes: start methods and pickling
# ---------------------------------------------------------------------------------------------
def spawn_main_attribute(tmp):
    # Code with no file behind `__main__` (a notebook cell; here `python -c`): the spawned
    # child cannot import it again to find `work`.
    cell = """
        import torch.multiprocessing as mp

        def work(rank):
            pass

        if __name__ == "__main__":
            mp.spawn(work, nprocs=1)
    """
    return _child(tmp, cell, mark="Can't get attribute", inline=True)


def cant_pickle_local_object(tmp):
    # spawn sends the rank's function to the child by pickling it: one defined inside another
    # function has no name to import. (The pickler itself, without starting a process.)
    def work(rank):
        pass

    ForkingPickler.dumps(work)


def bootstrapping_phase(tmp):
    # mp.spawn at the top of a script, without `if __name__ == "__main__":`: the child
    # imports the script again and starts spawning while it starts itself.
    script = """
        import torch.multiprocessing as mp

        def work(rank):
            pass

        mp.spawn(work, nprocs=1)
    """
    return _child(tmp, script, mark="An attempt has been made", keep=2)


# ---------------------------------------------------------------------------------------------
# Memory: ranks the kernel kills
# ---------------------------------------------------------------------------------------------
def spawn_process_sigkill(tmp):
    script = """
        import os, signal
        import torch.multiprocessing as mp

        def work(rank):
            os.kill(os.getpid(), signal.SIGKILL)

        if __name__ == "__main__":
            mp.spawn(work, nprocs=1)
    """
    return _child(tmp, script, mark="ProcessExitedException:")


def torchrun_exitcode_9(tmp):
    return _line_with(_torchrun_with_a_killed_rank(), "failed (exitcode: -9)")


def torchrun_signal_9_sigkill(tmp):
    return _line_with(_torchrun_with_a_killed_rank(), "Signal 9 (SIGKILL)")


class DiesWith(Dataset):
    """Item 0 loads; loading item 1 kills its worker with `sig`."""

    def __init__(self, sig):
        self.sig = sig

    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i > 0:
            time.sleep(0.3)
            os.kill(os.getpid(), self.sig)
        return torch.zeros(1)


def _train_while_a_worker_dies(dataset, **loader_args):
    # torch reports a worker's death from its SIGCHLD handler, wherever the main thread is
    # then: in a training step (a sleep here). Inside the DataLoader's own wait it reports
    # "exited unexpectedly" instead. fork: workers need not import torch again.
    batches = iter(
        DataLoader(dataset, num_workers=1, multiprocessing_context="fork", **loader_args)
    )
    try:
        next(batches)
        time.sleep(5)  # the training step; the handler interrupts it
    finally:
        batches._shutdown_workers()


def dataloader_worker_killed(tmp):
    _train_while_a_worker_dies(DiesWith(signal.SIGKILL))


# ---------------------------------------------------------------------------------------------
# Data: DataLoader workers, shared memory, file descriptors
# ---------------------------------------------------------------------------------------------
def _silence_stderr(_worker_id):
    # The worker's own SIGBUS handler prints a line of its own as it dies: one line is enough.
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)


def dataloader_bus_error(tmp):
    # A full /dev/shm makes a worker's write into shared memory fault with SIGBUS.
    _train_while_a_worker_dies(DiesWith(signal.SIGBUS), worker_init_fn=_silence_stderr)


class Leaves(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        os._exit(0)  # status 0: no signal to report, the worker is simply gone


def dataloader_exited_unexpectedly(tmp):
    loader = DataLoader(Leaves(), num_workers=1, timeout=1, multiprocessing_context="fork")
    batches = iter(loader)
    try:
        next(batches)
    finally:
        batches._shutdown_workers()


@contextlib.contextmanager
def _open_files_limit(extra):
    """`ulimit -n` lowered to `extra` above the files open now, and put back."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + extra, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)


class Fresh(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        return torch.full((4,), float(i))  # sent back in shared memory: one descriptor each


def too_many_open_files(tmp):
    # Sharing by file descriptor: each batch kept alive holds a descriptor open.
    batches = iter(
        DataLoader(Fresh(), batch_size=None, num_workers=1, multiprocessing_context="fork")
    )
    kept = []
    try:
        with _open_files_limit(40):
            kept.extend(batches)
    finally:
        batches._shutdown_workers()


def _send_tensors(queue, count, done):
    for i in range(count):
        queue.put(torch.full((4,), float(i)))
    queue.put(None)
    done.wait(30)  # the receiver fetches each descriptor from this process


def received_0_items_ancdata(tmp):
    # What a DataLoader does underneath: a tensor's descriptor travels over a socket, and at
    # the limit the kernel drops it from the message. The words are Python's multiprocessing.
    ctx = mp.get_context("fork")
    queue, done = ctx.SimpleQueue(), ctx.Event()
    sender = ctx.Process(target=_send_tensors, args=(queue, 60, done))
    sender.start()
    kept = []
    try:
        with _open_files_limit(20):
            while (tensor := queue.get()) is not None:
                kept.append(tensor)
    finally:
        # let the sender end by itself: killed while it makes a /dev/shm file, it leaves it
        done.set()
        sender.join(timeout=10)
        if sender.is_alive():
            sender.kill()
            sender.join()
        queue.close()
