"""The one way the labs in code/ start ranks on one machine, report a failed one, and leave.

The ranks meet through a file:// store in a directory made for the run, so no port is involved
and runs started at the same moment cannot meet. torch's process launcher also names an error
file for each rank with tempfile, and leaves behind the ones that get written; pointing tempfile
at the run's directory while the ranks run sends those files where the run's clean-up removes
them. A rank that fails is reported in one line, its rank and its error; torch ends the others.

    spawn_ranks   a context manager: ranks in a fresh directory, read their results, it is gone
    launch        the DDP labs' whole run: torchrun's env://, or spawned ranks in a given folder
    spawn         the step both build on; file_store, the init_method of a run's directory
    exit_now      leave a process whose work is done without a second of interpreter teardown

torch is imported only when ranks are spawned, so a script that may never spawn
(ring_allreduce.py --no-real) can import this module for free.
"""

import contextlib
import logging
import os
import shutil
import sys
import tempfile

# mp.spawn logs a warning for each rank it terminates after a failure; the one-line error
# that names the failed rank says all a reader needs.
logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)


class RankFailed(Exception):
    """One rank of a run failed; the message names the rank and its error in one line."""


def exit_now(status=0):
    """End this process at once, skipping the interpreter's teardown.

    Freeing torch's modules (torch._dynamo above all, which DDP and torch.optim import) takes
    Python about a second at exit. A process whose ranks are reaped, whose directory is gone and
    whose results are written, or a rank whose work is done and written, has nothing to lose.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


@contextlib.contextmanager
def temp_files_in(path):
    """Send the temp files made by this process (tempfile) into `path` while inside."""
    before = tempfile.tempdir
    tempfile.tempdir = path
    try:
        yield
    finally:
        tempfile.tempdir = before


def file_store(run_dir):
    """The init_method of ranks that meet through a file in `run_dir`."""
    return "file://" + os.path.join(run_dir, "store")


def error_line(err):
    """How a rank's error is quoted: its type and its message."""
    return f"{type(err).__name__}: {err}"


def failure_line(err):
    """The one line a failed run prints on stderr: the program, then the rank and its error."""
    return f"{os.path.basename(sys.argv[0])}: error: {err}"


def _run_then_exit(rank, worker, error_dir, *args):
    """A rank's whole life: run the worker, then leave without the interpreter's teardown.

    A failure is written as one line to error_dir/rank-R for the parent to quote; the exit
    status 1 is what makes torch end the other ranks.
    """
    try:
        worker(rank, *args)
    except Exception as err:
        with open(os.path.join(error_dir, f"rank-{rank}"), "w", encoding="utf-8") as out:
            out.write(error_line(err))
        exit_now(1)
    exit_now(0)


def spawn(worker, world_size, run_dir, args=(), start_method="spawn"):
    """Run worker(rank, world_size, run_dir, *args) in world_size new processes.

    run_dir is a fresh directory the caller made (and removes); the ranks meet through
    file_store(run_dir) and may write their results there. If any rank fails, torch ends the
    others and this raises RankFailed with the first failure. start_method "spawn" starts fresh
    interpreters; "forkserver" forks them from a server process that the caller started (and
    preloaded) earlier.
    """
    import torch.multiprocessing as mp

    try:
        with temp_files_in(run_dir):
            # mp.spawn(fn, args, nprocs) is this call with start_method="spawn".
            mp.start_processes(
                _run_then_exit,
                args=(worker, run_dir, world_size, run_dir, *args),
                nprocs=world_size,
                start_method=start_method,
            )
    except mp.ProcessExitedException as err:
        raise RankFailed(f"rank {err.error_index}: {why(err, run_dir)}") from None


def why(err, error_dir):
    """The failed rank's own one-line message, else how its process ended."""
    path = os.path.join(error_dir, f"rank-{err.error_index}")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as message:
            return message.read()
    if err.signal_name:
        return f"process ended by signal {err.signal_name}"
    return f"process ended with exit code {err.exit_code}"


@contextlib.contextmanager
def spawn_ranks(worker, world_size, args, prefix):
    """Spawn `world_size` ranks in a fresh temp directory whose name starts with `prefix`.

    Each rank runs worker(rank, world_size, run_dir, *args) and may write its results into
    run_dir, which the caller reads inside the `with`. Afterwards the directory is gone, error
    files included. A rank that raises ends the script with one line: the rank and its error.
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as run_dir:
        try:
            spawn(worker, world_size, run_dir, args)
        except RankFailed as err:
            sys.exit(failure_line(err))
        yield run_dir


def launch(run_rank, args, start_method="spawn"):
    """Run run_rank(rank, world_size, init_method, args) on every rank, then end this process.

    Under torchrun (args.torchrun) this process is one of the ranks and finds the others through
    torchrun's env://. Otherwise it spawns args.world_size ranks that meet in args.run_dir, a
    fresh directory the caller made and this removes. A failure is one line on stderr, status 1.
    """
    if args.torchrun:
        rank = int(os.environ["RANK"])
        try:
            run_rank(rank, args.world_size, "env://", args)
        except Exception as err:  # one line per failed rank; torchrun ends the others
            print(failure_line(f"rank {rank}: {error_line(err)}"), file=sys.stderr)
            exit_now(1)
        exit_now(0)
    status = 0
    try:
        spawn(_meet_in_store, args.world_size, args.run_dir, (run_rank, args), start_method)
    except RankFailed as err:
        print(failure_line(err), file=sys.stderr)
        status = 1
    finally:
        shutil.rmtree(args.run_dir, ignore_errors=True)
    # The ranks are gone and run_dir is removed: skip a second of interpreter teardown.
    exit_now(status)


def _meet_in_store(rank, world_size, run_dir, run_rank, args):
    """A spawned rank of launch(): run_rank as torchrun would call it, with a file:// store."""
    run_rank(rank, world_size, file_store(run_dir), args)
