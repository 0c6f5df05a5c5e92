"""What the failure-gallery scripts share: run ranks, trim their errors, print, write --json.

Each script in code/failures/ breaks the distributed rule one way, then shows the fix:

    python code/failures/rank0_collective.py                 # the short report a page embeds
    python code/failures/rank0_collective.py --json out.json # the same, plus every result

This module keeps the plumbing out of their way, so each of them reads as the story of its case:

- `run_groups` starts one gloo process group per variant (broken, fixed, ...), all at once.
  Every rank is a forked child that joins through a file:// store (launcher.file_store) in a
  temporary directory and reports what its function returned or raised. A hung collective ends
  by the group's short timeout; a rank still alive at the deadline is killed; the directory is
  removed. Nothing outlives the call, and the script ends with launcher.exit_now.
  `run_one_group` is the common case of a single group where nothing should fail: the script's
  variants run in it one after the other.
- `summarize` keeps a real exception message's first line, verbatim, for the page: a reader
  can paste it into a search box (or search the page for theirs) and find it.
- `Report` prints the human report, remembers every line, and writes the JSON (machine facts
  under "env", the printed lines under "printed", the checks that decide the exit status).
"""

import argparse
import contextlib
import dataclasses
import datetime
import json
import multiprocessing
import multiprocessing.connection
import os
import pathlib
import signal
import sys
import tempfile
import time
from collections.abc import Callable

# launcher.py, pace.py and provenance.py live one folder up, in code/; the scripts import this
# module by plain name.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import launcher  # noqa: E402
import pace  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Arguments shared by every script (parsed before torch is imported, so a typo fails at once)
# ---------------------------------------------------------------------------------------------
MARGIN_S = 2.0  # of the deadline, kept back for letting ranks leave and writing the report


def parse_args(description, *, deadline_s, hangs, counts=None):
    """The common options, plus `counts`: {"--name": (default, minimum, help)} for integers.

    `hangs`: the script has variants that hang on purpose, so it takes --pg-timeout-s.
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=pathlib.Path, help="also write every result to this file")
    parser.add_argument(
        "--deadline-s",
        type=float,
        help=f"seconds the runs may take once torch is loaded (default {deadline_s:g} on a "
        "machine where `import torch` takes 2 s, stretched on a slower one: code/pace.py)",
    )
    if hangs:
        parser.add_argument(
            "--pg-timeout-s",
            type=float,
            default=2.0,
            help="seconds a hung collective waits before gloo gives up (default 2)",
        )
    for flag, (default, _, text) in (counts or {}).items():
        parser.add_argument(flag, type=int, default=default, help=f"{text} (default {default})")
    args = parser.parse_args()
    hang_s = args.pg_timeout_s if hangs else 0.0
    if hangs and hang_s <= 0:
        parser.error("--pg-timeout-s must be positive")
    if args.deadline_s is not None and args.deadline_s < hang_s + MARGIN_S + 1:
        parser.error(f"--deadline-s must be at least {hang_s + MARGIN_S + 1:g} here")
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json: no folder {args.json.parent}")
    for flag, (_, minimum, _) in (counts or {}).items():
        if getattr(args, flag.lstrip("-").replace("-", "_")) < minimum:
            parser.error(f"{flag} must be at least {minimum}")
    if args.deadline_s is None:  # the arguments are fine: now torch may load (pace times it)
        args.deadline_s = pace.limit(deadline_s)
    return args


class DeadlineExceeded(Exception):
    pass


@contextlib.contextmanager
def overall_deadline(seconds):
    """End the script with a one-line error if it runs longer than `seconds`."""

    def expire(signum, frame):
        raise DeadlineExceeded(f"gave up: the script ran past its own {seconds:.4g} s deadline")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)  # a timer is not inherited by forked ranks
    try:
        yield
    except DeadlineExceeded as exc:
        raise SystemExit(f"error: {exc}") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------
# Error text for the page: the real message, cut short
# ---------------------------------------------------------------------------------------------
def summarize(message, keep=()):
    """The first line of `message`, verbatim, and any later line starting with one of `keep`.

    The later lines of a torch error are a C++ stack or a list of overloads: the first line is
    the message a reader sees, and searches for, so it is kept whole, build paths included.
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return " ".join([lines[0], *(line for line in lines[1:] if line.startswith(keep))])


def describe(exc, **summarize_options):
    """`Type: first line` of an exception, the way the report prints it."""
    return f"{type(exc).__name__}: {summarize(str(exc), **summarize_options)}"


# ---------------------------------------------------------------------------------------------
# Ranks: one forked child per rank, one process group per variant
# ---------------------------------------------------------------------------------------------
# Forking from a parent that has already imported torch starts a rank in milliseconds instead
# of the two or three seconds a spawned interpreter needs. So every variant gets a fresh group
# of its own, and a group left broken by a timeout is never reused. (Scripts that use DDP also
# import torch._dynamo before forking; the first DistributedDataParallel would otherwise load it
# in every rank.) DataLoader workers start the same way on Linux; it is safe here because the
# parent never joins a process group itself.
@dataclasses.dataclass
class Variant:
    body: Callable[[int, int], object]  # (rank, world_size) -> a picklable, JSON-ready value
    hangs: bool = False  # expected to hang: its group gets the short timeout, to fail quickly
    before_init: Callable[[], None] | None = None  # runs in the child before the group exists


@dataclasses.dataclass
class RankResult:
    rank: int
    status: str  # "ok", "raised", "died" (exited without answering), "killed" (at the deadline)
    value: object = None  # what the rank's function returned, when "ok"
    error: str = ""  # "Type: first line" when "raised"; the last words on stderr when "died"
    seconds: float = 0.0  # from the rank's start until it answered

    @property
    def ok(self):
        return self.status == "ok"


def run_groups(variants, *, deadline_s, hang_timeout_s=None, world_size=2):
    """Run every variant in its own `world_size`-rank gloo group, all at the same time.

    `variants` maps a name to a Variant (or to a bare body function). A variant marked `hangs`
    gets `hang_timeout_s` as its process-group timeout; the others get the whole deadline, so
    that a slow, busy machine cannot make a healthy collective time out. Returns
    {name: [RankResult of rank 0, 1, ...]} once every rank has answered or died, or after
    `deadline_s` minus a margin for the ranks to leave, whichever comes first.
    """
    variants = {name: v if isinstance(v, Variant) else Variant(v) for name, v in variants.items()}
    if any(v.hangs for v in variants.values()) and hang_timeout_s is None:
        raise ValueError("a variant that hangs needs hang_timeout_s")
    started, runs_s = time.monotonic(), deadline_s - MARGIN_S
    context = multiprocessing.get_context("fork")
    release = context.Event()  # set when every rank has answered: then they may leave
    children, collected = [], {}
    with tempfile.TemporaryDirectory(prefix="ddp-failure-") as scratch:
        try:
            for index, (name, variant) in enumerate(variants.items()):
                folder = pathlib.Path(scratch, f"group{index}")
                folder.mkdir()
                timeout_s = hang_timeout_s if variant.hangs else runs_s
                for rank in range(world_size):
                    answer, answer_in_child = context.Pipe(duplex=False)
                    process = context.Process(
                        target=rank_main,
                        args=(variant, rank, world_size, folder, timeout_s),
                        kwargs=dict(answer=answer_in_child, release=release, wait_s=deadline_s),
                        daemon=True,
                    )
                    process.start()
                    answer_in_child.close()  # the child holds the only writing end now
                    children.append(Child(name, rank, process, answer, folder))
            collected = collect(children, started + runs_s)
        finally:
            release.set()
            reap(children, collected)
    return {name: [collected[name, rank] for rank in range(world_size)] for name in variants}


def ended_in_time(results, timeout_s):
    """Whether every rank ended within `timeout_s` plus the few seconds a rank that gave up takes
    to report it and leave (3 s where `import torch` takes 2 s; more on a slower machine)."""
    return all(r.seconds < timeout_s + pace.limit(3) for r in results)


def run_one_group(body, *, deadline_s, world_size=2):
    """Run `body` in one `world_size`-rank group that should not hang; return its RankResults."""
    return run_groups({"only": body}, deadline_s=deadline_s, world_size=world_size)["only"]


def rank_main(variant, rank, world_size, folder, pg_timeout_s, *, answer, release, wait_s):
    """One rank: join the group, run the variant's body, report, wait to be released."""
    import torch
    import torch.distributed as dist

    log = os.open(folder / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(log, 2)  # C++ warnings and aborts land in the log, where the parent can read them
    torch.set_num_threads(1)  # several ranks share two cores
    started = time.perf_counter()
    try:
        if variant.before_init is not None:
            variant.before_init()
        dist.init_process_group(
            "gloo",
            init_method=launcher.file_store(folder),
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=pg_timeout_s),
        )
        value = variant.body(rank, world_size)
        answer.send(("ok", value, "", time.perf_counter() - started))
    except Exception as exc:
        error = describe(exc)
        answer.send(("raised", None, error, time.perf_counter() - started))
    finally:
        # Stay connected until every rank has answered: a rank that left early would turn the
        # others' timeout into "connection closed by peer" and hide the real symptom.
        release.wait(wait_s)
        if dist.is_initialized():
            dist.destroy_process_group()


@dataclasses.dataclass
class Child:
    variant: str
    rank: int
    process: multiprocessing.Process
    answer: multiprocessing.connection.Connection
    folder: pathlib.Path

    def read(self):
        """The rank's answer, or None if it has not answered yet (and is still alive)."""
        try:
            if self.answer.poll():
                status, value, error, seconds = self.answer.recv()
                return RankResult(self.rank, status, value, error, round(seconds, 2))
        except EOFError:
            pass  # it closed the pipe without a word: it died
        if self.process.exitcode is None:
            return None
        return RankResult(self.rank, "died", error=self.last_words())

    def last_words(self):
        """Why the process ended: its exit signal and the last telling line of its stderr."""
        code = self.process.exitcode
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        log = (self.folder / f"rank{self.rank}.log").read_text(errors="replace").splitlines()
        lines = [line.strip() for line in log if line.strip()]
        # A C++ exception that nobody caught ends with "terminate called ... what(): MESSAGE".
        aborts = [line.split("what():", 1)[1] for line in lines if "what():" in line]
        return f"{how}: {summarize((aborts or lines or [''])[-1])}".rstrip(": ")


def collect(children, deadline):
    """Wait for every rank's answer (or death) until `deadline` (a time.monotonic() value)."""
    results = {}
    while len(results) < len(children) and (left := deadline - time.monotonic()) > 0:
        waiting = [child for child in children if (child.variant, child.rank) not in results]
        handles = [child.answer for child in waiting] + [c.process.sentinel for c in waiting]
        multiprocessing.connection.wait(handles, timeout=left)
        for child in waiting:
            if (result := child.read()) is not None:
                results[child.variant, child.rank] = result
    for child in children:
        results.setdefault(
            (child.variant, child.rank),
            RankResult(child.rank, "killed", error="still running at the deadline: killed"),
        )
    return results


def reap(children, collected, grace_s=MARGIN_S):
    """Give ranks that answered a moment to leave their groups; kill every other one at once."""
    give_up = time.monotonic() + grace_s
    for child in children:
        result = collected.get((child.variant, child.rank))
        if result is not None and result.status != "killed":
            child.process.join(max(0.0, give_up - time.monotonic()))
        if child.process.is_alive():
            child.process.kill()
        child.process.join()
        child.answer.close()


# ---------------------------------------------------------------------------------------------
# The report: what the page shows, and the JSON the tests read
# ---------------------------------------------------------------------------------------------
class Report:
    def __init__(self, case):
        self.case = case
        self.lines = []

    def say(self, text=""):
        print(text, flush=True)
        self.lines.append(text)

    def group(self, title, results, show_value=repr, timed=True):
        """A title (with the slowest rank's time), then what each rank returned or raised.

        Each rank gets one line, however long: an error message stays whole and unwrapped, so
        that the page's code block scrolls instead of breaking it where a search would miss it.
        """
        slowest = max(result.seconds for result in results)
        self.say(f"{title}  [{slowest:.1f} s]" if timed else title)
        for result in results:
            what = show_value(result.value) if result.ok else result.error
            if result.status == "died":
                what = f"died, {what}"
            self.say(f"  rank {result.rank}  {what}")

    def failed_unexpectedly(self, json_path, results):
        """For a group meant to run cleanly: show how each rank ended, write the JSON, return 1."""
        self.group("the ranks failed unexpectedly", results)
        return self.finish(json_path, {"every rank answered": False}, results=results)

    def finish(self, json_path, checks, **results):
        """Write the JSON; return the exit status: 0 only if every check holds."""
        failed = [name for name, holds in checks.items() if not holds]
        if json_path is not None:
            from provenance import machine_facts

            record = {
                "case": self.case,
                "as_expected": not failed,
                "checks": checks,
                "printed": self.lines,
                "env": machine_facts(),
                **results,
            }
            json_path.write_text(json.dumps(record, indent=1, default=jsonable) + "\n")
        if failed:
            print(f"not as expected: {', '.join(failed)}", file=sys.stderr)
        return 1 if failed else 0


def jsonable(value):
    if dataclasses.is_dataclass(value):
        return {**dataclasses.asdict(value), "ok": value.ok}
    raise TypeError(f"{type(value).__name__} is not JSON-ready")
