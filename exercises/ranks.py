"""Run a function on several gloo ranks for the exercises' tests, and explain what went wrong.

    results = run_ranks(worker, 3, "exercise 1's all_reduce", hang="a rank did not send")

starts 3 processes that meet through a file:// store in a fresh temporary directory, runs
worker(rank, world_size) on each, and returns what each returned, in rank order. Anything
goes wrong and it raises RankFailed, whose first line says what happened in plain words:

    rank 0 raised NotImplementedError: exercise 1: ...
    rank 0 waited 10 s in exercise 1's all_reduce: a rank did not send

and whose body holds every rank's traceback. A test that knows more than a raw error, such as
the parameter it concerns, raises Explained from it inside the rank: its words follow "rank 0 ".
The process group's timeout turns a learner's deadlock into an error inside the rank within
`timeout_s`; a rank stuck outside torch is killed a few seconds later. Either way every rank
is ended and the directory removed before run_ranks returns, so a test never hangs and leaves
nothing behind.

load_exercise(NAME) imports the exercise file the tests grade: the one beside the tests,
unless EXERCISES_FROM names another folder (the course's CI points it at solutions/).
"""

import datetime
import importlib
import multiprocessing
import multiprocessing.connection
import os
import pathlib
import pickle
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
GRACE_S = 5  # after the process-group timeout, how long a rank may take to report it
# How gloo words the two ways a rank is left waiting.
TIMED_OUT = "Timed out waiting"
PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


class RankFailed(AssertionError):
    """A rank raised, waited too long, or died; the message says which and why."""


class Explained(Exception):
    """A learner's error retold by a test inside a rank, with what it concerns (a parameter's
    name where torch's words print none). The words read after "rank N ", as in "raised
    TypeError in average_gradients, where ..."; the original error is its __cause__, so the
    traceback keeps torch's own."""


def load_exercise(name):
    """Import the module `name` from the folder being graded (see the module's docstring)."""
    folder = pathlib.Path(os.environ.get("EXERCISES_FROM") or HERE).resolve()
    if str(folder) not in sys.path[:1]:
        sys.path.insert(0, str(folder))
    module = importlib.import_module(name)
    if pathlib.Path(module.__file__).resolve().parent != folder:
        raise RuntimeError(f"{name} was imported from {module.__file__}, not from {folder}")
    return module


def run_ranks(
    worker, world_size, what, hang="a rank never reached the collective", timeout_s=10, ddp=False
):
    """Run worker(rank, world_size) on `world_size` gloo ranks; return their results by rank.

    `what` names the step for a message ("exercise 1's all_reduce"); `hang` says what a
    timeout usually means there. Results travel back pickled, so return tensors or plain values.
    ddp=True says the worker uses torch's DDP or torch.optim, whose first use imports
    torch._dynamo (seconds on a busy machine): imported once here, every forked rank has it.
    """
    context = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    if ddp and context.get_start_method() == "fork":
        import torch._dynamo  # noqa: F401
    with tempfile.TemporaryDirectory(prefix="exercise-ranks-") as scratch:
        store = pathlib.Path(scratch) / "store"
        links, processes = [], []
        try:
            for rank in range(world_size):
                ours, theirs = context.Pipe(duplex=False)
                args = (worker, rank, world_size, store, timeout_s, theirs)
                process = context.Process(target=_rank_main, args=args, daemon=True)
                process.start()
                theirs.close()
                links.append(ours)
                processes.append(process)
            reports = _collect(links, processes, timeout_s + GRACE_S)
        finally:
            _end(processes)
            for link in links:
                link.close()
    return _verdict(reports, world_size, what, hang, timeout_s)


# ---------------------------------------------------------------------------------------------
# Inside a rank
# ---------------------------------------------------------------------------------------------
def _rank_main(worker, rank, world_size, store, timeout_s, link):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # the ranks share the machine's cores; one thread each is fastest
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{store}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        report = ("ok", worker(rank, world_size))
    except BaseException as error:  # noqa: B036 (any failure must reach the test, then exit)
        told = isinstance(error, Explained)
        words = str(error) if told else f"raised {type(error).__name__}: {error}"
        report = ("error", words, traceback.format_exc())
    # Reported before the process group goes away, so a cause arrives before its echoes.
    if report[0] == "error":
        link.send_bytes(pickle.dumps(report))
    if dist.is_initialized():
        dist.destroy_process_group()
    if report[0] == "ok":
        link.send_bytes(pickle.dumps(report))
    link.close()


# ---------------------------------------------------------------------------------------------
# In the test's process
# ---------------------------------------------------------------------------------------------
def _collect(links, processes, budget_s):
    """Read each rank's report until all arrived, one rank failed, or the budget ran out."""
    reports, deadline = {}, time.monotonic() + budget_s
    waiting = dict(enumerate(links))
    while waiting and time.monotonic() < deadline:
        for link in multiprocessing.connection.wait(
            list(waiting.values()), timeout=deadline - time.monotonic()
        ):
            rank = next(r for r, ours in waiting.items() if ours is link)
            del waiting[rank]
            try:
                reports[rank] = pickle.loads(link.recv_bytes())
            except EOFError:
                processes[rank].join(1)
                code = processes[rank].exitcode
                reports[rank] = ("error", f"died with exit code {code}", "")
        if any(report[0] == "error" for report in reports.values()):
            # Give the others a moment: their tracebacks help, and a peer's echo is no cause.
            deadline = min(deadline, time.monotonic() + 1)
    return reports


def _end(processes):
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(5)


def _verdict(reports, world_size, what, hang, timeout_s):
    if len(reports) == world_size and all(r[0] == "ok" for r in reports.values()):
        return [reports[rank][1] for rank in range(world_size)]
    errors = {rank: r for rank, r in sorted(reports.items()) if r[0] == "error"}
    missing = [rank for rank in range(world_size) if rank not in reports]
    headline = _headline(errors, missing, what, hang, timeout_s)
    details = [f"--- rank {rank} ---\n{r[2] or r[1]}" for rank, r in errors.items()]
    details += [f"--- rank {rank} --- still running: ended by the test" for rank in missing]
    raise RankFailed(headline + "\n\n" + "\n".join(details))


def _waited(message):
    """Whether gloo says this rank was left waiting: a symptom, not a cause."""
    return TIMED_OUT in message or any(gone in message for gone in PEER_GONE)


def _headline(errors, missing, what, hang, timeout_s):
    """The cause in one line: a rank's own error beats a peer's echo of it."""
    causes = [(rank, r[1]) for rank, r in errors.items() if not _waited(r[1])]
    if causes:
        rank, message = causes[0]
        return f"rank {rank} {message}"
    timed_out = [rank for rank, r in errors.items() if TIMED_OUT in r[1]]
    if timed_out:
        return f"rank {timed_out[0]} waited {timeout_s:g} s in {what}: {hang}"
    if errors:
        rank = next(iter(errors))
        return f"rank {rank} lost its peers in {what}: another rank left early ({hang})"
    return f"rank {missing[0]} was still running after {timeout_s + GRACE_S:g} s in {what}: {hang}"
