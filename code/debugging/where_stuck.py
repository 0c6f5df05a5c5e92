"""Where is it stuck? Start a hang, then ask every rank with `py-spy dump`.

    python where_stuck.py                  # rank 0 all-reduces alone: both ranks hang
    python where_stuck.py --fixed          # every rank all-reduces: nothing hangs
    python where_stuck.py --json out.json  # the same, plus every dump, as JSON

The ranks run the failure gallery's collective inside `if rank == 0:` (failures/
rank0_collective.py): rank 0 all-reduces its loss to log it, rank 1 skips the block and waits
at the barrier. This script starts the two ranks as separate processes on gloo, as torchrun
would, and polls them with `py-spy dump` until every rank shows the same stack, inside a
torch.distributed call, dump after dump: then they are stuck, not slow. It prints the last dump
of each rank (the command a reader types on a hung job), says where each rank waits, and kills
the ranks.

py-spy reads another process's memory. Linux allows that to root, and to the same user where
ptrace is not restricted (`cat /proc/sys/kernel/yama/ptrace_scope` prints 0, or no such file);
where it is refused, this script says so in one line and exits with status 2.
"""

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

# code/, one folder up, holds what every family of labs shares: pace, provenance, lab_cli,
# the launcher. Put it on the path, so this script runs from any folder.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import pace  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = pathlib.Path(__file__).name  # how py-spy names this file: the ranks start in HERE
WORLD_SIZE = 2
STORE_ENV = "WHERE_STUCK_STORE"  # the ranks' file:// store, kept off their command lines


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fixed", action="store_true", help="every rank calls the all_reduce")
    parser.add_argument("--json", type=pathlib.Path, help="also write every result to this file")
    parser.add_argument(
        "--deadline-s",
        type=float,
        help="seconds the whole run may take (default 30 on a machine where `import torch` "
        "takes 2 s, stretched on a slower one: pace.py)",
    )
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # set for the ranks only
    args = parser.parse_args()
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json: no folder {args.json.parent}")
    if args.deadline_s is None:
        args.deadline_s = pace.limit(30)
    return args


# ---------------------------------------------------------------------------------------------
# The ranks: what py-spy will find (each rank is `python where_stuck.py --rank R`)
# ---------------------------------------------------------------------------------------------
def log_on_rank0_then_barrier(rank):
    loss = torch.tensor([float(rank + 1)])
    if rank == 0:
        dist.all_reduce(loss)  # the bug: rank 1 never calls this
    dist.barrier()


def every_rank_reduces(rank):
    loss = torch.tensor([float(rank + 1)])
    dist.all_reduce(loss)  # every rank takes part; only the printing would be rank 0's
    dist.barrier()


def run_rank(rank, fixed, timeout_s):
    """Join the group and run one step. The timeout outlasts the search: the ranks are killed
    long before gloo would give up, and a rank orphaned by a crashed parent still ends."""
    dist.init_process_group(
        "gloo",
        init_method=f"file://{os.environ[STORE_ENV]}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    step = every_rank_reduces if fixed else log_on_rank0_then_barrier
    step(rank)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# Reading a dump: py-spy prints a thread's frames innermost first, `function (file:line)`
# ---------------------------------------------------------------------------------------------
FRAME = re.compile(r"^\s+(?P<function>\S.*) \((?P<file>[^()]+):(?P<line>\d+)\)$")


@dataclasses.dataclass
class Frame:
    function: str
    file: str
    line: int


def frames_of(dump):
    """The main thread's frames, innermost first (the dump's first thread is the main one)."""
    frames = []
    for line in dump.splitlines():
        if line.startswith("Thread ") and frames:
            break
        if match := FRAME.match(line):
            frames.append(Frame(match["function"], match["file"], int(match["line"])))
    return frames


def where(frames):
    """The innermost frame of user code, and the torch.distributed function it called (if any).

    py-spy shortens a file in site-packages to its package path (torch/distributed/...), and
    shows a script by the path it was started with: everything outside torch/ is user code.
    The function called is the outermost public one: torch wraps each collective in a logging
    decorator (`_exception_logger.<locals>.wrapper`), which is skipped.
    """
    for index, frame in enumerate(frames):
        if not frame.file.startswith("torch/"):
            called = [f.function for f in frames[:index] if is_public_distributed(f)]
            return frame, (called[-1] if called else None)
    return None, None


def is_public_distributed(frame):
    return (
        frame.file.startswith("torch/distributed/")
        and frame.function.isidentifier()
        and not (frame.function.startswith("_"))
    )


# ---------------------------------------------------------------------------------------------
# The search: start the ranks, dump them until they are stuck (or gone), kill them
# ---------------------------------------------------------------------------------------------
SETTLE_DUMPS = 3  # the same stack this many times in a row, ...
POLL_S = 0.5  # ... this far apart, in a torch.distributed call: stuck
REFUSED_S = 10  # seconds (pace.py stretches them) a live rank may stay unreadable to py-spy


class CannotDump(Exception):
    """py-spy is missing, or the kernel does not let it read the ranks."""


def py_spy():
    """The py-spy beside this Python (a venv's bin/, which need not be on PATH), else on PATH."""
    beside_python = pathlib.Path(sys.executable).parent / "py-spy"
    found = str(beside_python) if beside_python.is_file() else shutil.which("py-spy")
    if found is None:
        raise CannotDump("py-spy not found: pip install py-spy")
    return found


def start_ranks(fixed, store, deadline_s):
    """One process per rank, in this process group, so that a runner that kills the group
    kills them too. They start in this folder, so that py-spy names this file plainly."""
    env = {**os.environ, STORE_ENV: str(store), "PYTHONUNBUFFERED": "1"}
    ranks = []
    for rank in range(WORLD_SIZE):
        argv = [sys.executable, SCRIPT, "--rank", str(rank), "--deadline-s", f"{deadline_s:g}"]
        argv += ["--fixed"] if fixed else []
        with open(log_of(store, rank), "wb") as log:  # the child keeps its own copy open
            ranks.append(subprocess.Popen(argv, cwd=HERE, env=env, stdout=log, stderr=log))
    return ranks


def log_of(store, rank):
    return store.parent / f"rank{rank}.log"


def last_words(store):
    """Each rank's last line of output: why a rank that crashed did."""
    lines = {
        rank: log_of(store, rank).read_text(errors="replace").split("\n")
        for rank in range(WORLD_SIZE)
    }
    return {
        rank: next((ln for ln in reversed(text) if ln.strip()), "") for rank, text in lines.items()
    }


def dump(tool, process):
    """`py-spy dump --pid PID`'s output, or py-spy's error as a CannotDump (raised at once
    where the kernel refuses: asking again will not help)."""
    done = subprocess.run(
        [tool, "dump", "--pid", str(process.pid)],
        capture_output=True,
        text=True,
        timeout=pace.limit(10),
    )
    if done.returncode != 0:
        said = [ln for ln in done.stderr.splitlines() if ln.startswith("Error")] or ["(nothing)"]
        refused = CannotDump(f"py-spy could not read rank pid {process.pid}: {said[0]}")
        if "permission" in said[0].lower():
            raise refused
        return refused
    return done.stdout


def wait_until_stuck(tool, ranks, give_up_at):
    """Dump every rank until all of them are stuck, or all have exited, or time runs out.

    Returns (state, the last dumps if stuck, seconds): state is "stuck", "finished" (every rank
    exited with status 0), "crashed" (every rank exited, one or more with an error) or
    "undecided" (time ran out first). A rank that is starting or exiting cannot be read for a
    moment (seconds, on a busy machine); one that stays unreadable for REFUSED_S raises.
    """
    started, history, refused_since = time.monotonic(), [], None
    while time.monotonic() < give_up_at:
        if all(process.poll() is not None for process in ranks):
            ended = "finished" if all(p.returncode == 0 for p in ranks) else "crashed"
            return ended, None, time.monotonic() - started
        dumps = [dump(tool, process) for process in ranks]
        live_refused = [
            d
            for d, p in zip(dumps, ranks, strict=True)
            if isinstance(d, CannotDump) and p.poll() is None
        ]
        if not live_refused:
            refused_since = None
        elif refused_since is None:
            refused_since = time.monotonic()
        elif time.monotonic() - refused_since > pace.limit(REFUSED_S):
            raise live_refused[0]
        if all(isinstance(d, str) for d in dumps):
            stacks = [frames_of(text) for text in dumps]
            in_collective = all(where(stack)[1] is not None for stack in stacks)
            history = [*history, stacks][-SETTLE_DUMPS:] if in_collective else []
            if len(history) == SETTLE_DUMPS and all(h == stacks for h in history):
                return "stuck", dumps, time.monotonic() - started
        time.sleep(POLL_S)
    return "undecided", None, time.monotonic() - started


def stop_ranks(ranks):
    for process in ranks:
        if process.poll() is None:
            process.kill()
        process.wait()


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------
def shown(dump, process):
    """The dump as a reader sees it, trimmed: the interpreter's path and version line go."""
    lines = dump.strip().splitlines()
    head = f"Process {process.pid}: python {SCRIPT} " + " ".join(process.args[2:4])
    return "\n".join([head, *(ln for ln in lines[1:] if ln and not ln.startswith("Python v"))])


def rank_record(rank, process, dump):
    frame, collective = where(frames_of(dump))
    return {
        "rank": rank,
        "pid": process.pid,
        "function": frame.function,
        "file": frame.file,
        "line": frame.line,
        "collective": collective,
        "in_all_reduce": collective == "all_reduce",
        "in_barrier": collective == "barrier",
        "dump": dump,
    }


def main(args):
    tool = py_spy()
    mode = "every rank calls all_reduce" if args.fixed else "rank 0 alone calls all_reduce"
    print(f"{WORLD_SIZE} ranks on gloo, {mode}, then every rank calls barrier", flush=True)
    give_up_at = time.monotonic() + args.deadline_s - pace.limit(2)
    with tempfile.TemporaryDirectory(prefix="where-stuck-") as scratch:
        store = pathlib.Path(scratch, "store")
        ranks = start_ranks(args.fixed, store, args.deadline_s)
        try:
            state, dumps, seconds = wait_until_stuck(tool, ranks, give_up_at)
        finally:
            stop_ranks(ranks)
        said = last_words(store)
    records = []
    if state == "stuck":
        print(f"stuck: every rank showed the same stack in {SETTLE_DUMPS} dumps in a row\n")
        for rank, (process, text) in enumerate(zip(ranks, dumps, strict=True)):
            print(f"$ py-spy dump --pid {process.pid}    # rank {rank}")
            print(shown(text, process) + "\n")
            records.append(rank_record(rank, process, text))
        for r in records:
            print(
                f"rank {r['rank']}: in {r['collective']}, {r['file']}:{r['line']} ({r['function']})"
            )
        print("ranks killed")
    elif state == "finished":
        print(f"not stuck: every rank finished, {seconds:.1f} s after they started")
    elif state == "crashed":
        print("not stuck, but failed: a rank exited with an error")
        for rank, line in said.items():
            print(f"  rank {rank}: {line}")
    else:
        print(f"undecided: neither stuck nor finished after {seconds:.1f} s; ranks killed")
    expected = "finished" if args.fixed else "stuck"
    result = {"state": state, "expected": expected, "as_expected": state == expected}
    if args.json is not None:
        from provenance import machine_facts

        record = {
            **result,
            "ranks": records,
            "pids": [p.pid for p in ranks],
            "env": machine_facts(),
        }
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0 if state == expected else 1


if __name__ == "__main__":
    args = parse_args()
    if args.rank is not None:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # two ranks share the cores with everything else
        run_rank(args.rank, args.fixed, args.deadline_s)
        # Unloading torch module by module takes seconds on a busy machine, and the rank has
        # nothing left to tidy: its group is destroyed and it wrote nothing.
        os._exit(0)
    else:
        try:
            sys.exit(main(args))
        except CannotDump as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
