"""Ranks on one machine that meet without a port, and leave no file behind.

The ranks rendezvous through a file:// store in a directory made for the run. torch's process
launcher also names an error file for each rank with tempfile, and leaves behind the ones that
get written; pointing tempfile at the run's directory while the ranks run sends those files
where the run's clean-up removes them. torch is imported only when ranks are spawned, so a
script that may never spawn (ring_allreduce.py --no-real) can import this module for free.
"""

import contextlib
import sys
import tempfile


@contextlib.contextmanager
def temp_files_in(path):
    """Send the temp files made by this process (tempfile) into `path` while inside."""
    before = tempfile.tempdir
    tempfile.tempdir = path
    try:
        yield
    finally:
        tempfile.tempdir = before


@contextlib.contextmanager
def spawn_ranks(worker, world_size, args, prefix):
    """mp.spawn `world_size` ranks that meet through a file:// store in a fresh temp directory.

    Each rank runs worker(rank, world_size, run_dir, *args) and may write its results into
    run_dir, which the caller reads inside the `with`; the directory's name starts with `prefix`.
    Afterwards the directory is gone, error files included. A rank that raises ends the script
    with one line: the rank and the last line of its traceback.
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix=prefix) as run_dir:
        try:
            with temp_files_in(run_dir):
                mp.spawn(worker, args=(world_size, run_dir, *args), nprocs=world_size)
        except mp.ProcessRaisedException as error:
            last_line = error.msg.strip().splitlines()[-1]
            sys.exit(f"rank {error.error_index} failed: {last_line}")
        yield run_dir
