"""Failure: ranks all-reduce tensors of different shapes. Usually an abort; sometimes silence.

    python code/failures/shape_mismatch.py
    python code/failures/shape_mismatch.py --json shapes.json

Rank 0 all-reduces n0 numbers, rank 1 only n1 < n0 (think of a per-class metric computed over
the classes each rank happened to see). gloo checks the size of what arrives only when a whole
message comes in that is larger than the buffer waiting for it; then it aborts the process. The
same two ranks run five times, each pair in its own group, side by side:

1. 1000 against 999: rank 1 is killed by SIGABRT ("Received data size doesn't match expected
   size"), which no try/except can catch, and rank 0 loses its connection. Most size pairs
   end this way;
2. 4 against 3, one of the few pairs that stay silent: rank 1 returns a wrong sum, rank 0 waits
   for data that never comes and times out;
3. 4 against 3 with TORCH_DISTRIBUTED_DEBUG=DETAIL put into the environment inside the rank,
   just before init_process_group: torch.distributed read the variable when it was imported,
   so nothing changes;
4. the same, followed by dist.set_debug_level_from_env(), which re-reads it: each collective is
   now checked across ranks first, and both ranks fail at once with both shapes in the message;
5. the fix: the same shape on every rank.

Alongside, a fresh interpreter started with the variable already in its environment (as a shell
`export` or a launcher would do it) reports the debug level it gets at import.
"""

import harness
import launcher  # in code/, which harness puts on the path

args = harness.parse_args(__doc__, hangs=True, deadline_s=15)

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

WORLD_SIZE = 2
# Each variant below chooses its own debug mode, so this process (and the ranks it forks) starts
# from the default, OFF, whatever the calling shell exported.
os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
dist.set_debug_level_from_env()


# ---------------------------------------------------------------------------------------------
# What every rank runs, and the two ways of asking for DETAIL before init_process_group
# ---------------------------------------------------------------------------------------------
def all_reduce_ones(rank, world_size, length):
    level = dist.get_debug_level().name  # what this rank's torch.distributed actually uses
    values = torch.ones(length)
    try:
        dist.all_reduce(values)
    except RuntimeError as exc:  # gloo's abort is not an exception: this never sees it
        return {"debug_level": level, "error": harness.describe(exc)}
    return {"debug_level": level, "sum": values.tolist()}


def far_apart(rank, world_size):
    return all_reduce_ones(rank, world_size, length=1000 if rank == 0 else 999)


def mismatched(rank, world_size):
    return all_reduce_ones(rank, world_size, length=4 if rank == 0 else 3)


def matched(rank, world_size):
    return all_reduce_ones(rank, world_size, length=4)


def set_detail_in_environment():
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"


def set_detail_and_reread():
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    dist.set_debug_level_from_env()


LEVEL_AT_IMPORT = "import torch.distributed as dist; print(dist.get_debug_level().name)"


def start_fresh_interpreter_with_detail():
    """A new Python whose environment holds the variable before torch.distributed loads."""
    environment = dict(os.environ, TORCH_DISTRIBUTED_DEBUG="DETAIL")
    return subprocess.Popen(
        [sys.executable, "-c", LEVEL_AT_IMPORT], env=environment, stdout=subprocess.PIPE, text=True
    )


# ---------------------------------------------------------------------------------------------
# Run them, print, check
# ---------------------------------------------------------------------------------------------
def show(value):
    if value is None:  # the rank died; the report prints how
        return ""
    if "error" in value:
        return f"debug level {value['debug_level']}, {value['error']}"
    return f"debug level {value['debug_level']}, returned sum {value['sum']}"


def main():
    report = harness.Report("mismatched shapes")
    report.say(f"{WORLD_SIZE} ranks, gloo, hung collectives give up after {args.pg_timeout_s:g} s")
    report.say("dist.all_reduce(torch.ones(n)), n differs between the ranks:")
    fresh = start_fresh_interpreter_with_detail()  # it imports torch while the groups run
    try:
        groups = harness.run_groups(
            {
                "abort": harness.Variant(far_apart, hangs=True),
                "as_is": harness.Variant(mismatched, hangs=True),
                "env_in_rank": harness.Variant(
                    mismatched, hangs=True, before_init=set_detail_in_environment
                ),
                "env_reread": harness.Variant(mismatched, before_init=set_detail_and_reread),
                "fixed": matched,
            },
            world_size=WORLD_SIZE,
            deadline_s=args.deadline_s,
            hang_timeout_s=args.pg_timeout_s,
        )
        fresh_level = fresh.communicate(timeout=args.deadline_s / 2)[0].strip()
    finally:
        fresh.kill()
        fresh.wait()
    report.group("n = 1000 on rank 0, 999 on rank 1", groups["abort"], show)
    report.group("n = 4 on rank 0, 3 on rank 1", groups["as_is"], show)
    report.group(
        "n = 4 and 3, TORCH_DISTRIBUTED_DEBUG=DETAIL set before init_process_group",
        groups["env_in_rank"],
        show,
    )
    report.group(
        "n = 4 and 3, the same, then dist.set_debug_level_from_env()",
        groups["env_reread"],
        show,
    )
    report.group("fixed: n = 4", groups["fixed"], show)
    report.say(f"new interpreter, TORCH_DISTRIBUTED_DEBUG=DETAIL exported: {fresh_level}")

    def values(name):
        return [result.value for result in groups[name]]

    as_is, in_rank, reread, fixed = (
        values(name) for name in ("as_is", "env_in_rank", "env_reread", "fixed")
    )
    aborted, survivor = groups["abort"][1], groups["abort"][0]
    checks = {
        "1000 vs 999: rank 1 killed by SIGABRT, size mismatch named": aborted.status == "died"
        and "SIGABRT" in aborted.error
        and "Received data size doesn't match expected size" in aborted.error,
        "1000 vs 999: rank 0 loses its peer": survivor.ok and "error" in survivor.value,
        "as is: rank 1 returns a sum, not of all ones doubled": as_is[1].get("sum")
        not in (None, [2.0] * 3),
        "as is: rank 0 times out": "Timed out" in as_is[0].get("error", ""),
        "set in the rank: still OFF and still silent on rank 1": all(
            v["debug_level"] == "OFF" for v in in_rank
        )
        and "sum" in in_rank[1],
        "re-read: DETAIL, every rank reports the mismatch": all(
            v["debug_level"] == "DETAIL" and "Detected mismatch" in v.get("error", "")
            for v in reread
        ),
        "fixed: every rank sums to 2": all(v.get("sum") == [2.0] * 4 for v in fixed),
        "fresh interpreter: DETAIL at import": fresh_level == "DETAIL",
        "every rank but the aborted one answered": all(
            r.ok for name, results in groups.items() for r in results if r is not aborted
        ),
    }
    return report.finish(args.json, checks, groups=groups, fresh_interpreter_level=fresh_level)


if __name__ == "__main__":
    with harness.overall_deadline(args.deadline_s):
        status = main()
    launcher.exit_now(status)
