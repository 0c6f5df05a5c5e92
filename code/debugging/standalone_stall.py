"""When this machine's own name does not resolve: torchrun's stall, and the two fixes that work.

    sudo python standalone_stall.py                  # four launches of chapter 1's job
    sudo python standalone_stall.py --json out.json  # the same, plus every result, as JSON

torchrun's agent hosts the store its workers meet at, and it names that store by its own host
name, `socket.getfqdn()`, whatever `--rdzv_endpoint` says. On a laptop whose name has no
address (a Mac on a new network is the usual case), the agent's own first connection to that
store retries the name, warning each time that its IPv6 addresses "cannot be retrieved", and
no worker is ever started.

This script starts chapter 1's first job (train_ddp.py, two processes) four ways on a host whose
name cannot resolve: `--standalone`; c10d at an explicit 127.0.0.1 endpoint; the static
rendezvous with `--master_addr=127.0.0.1`; and c10d with `--local-addr=127.0.0.1`, which
replaces the agent's own name. A launch that keeps warning is stopped, and the script
says how many workers it had started by then.

Each launch runs in namespaces of its own (unshare, so it needs root): its own host name,
`trainer.invalid`, which no resolver answers; a network with only loopback, so no lookup leaves
the machine; a scratch folder of its own, a fresh tmpfs over /dev/shm (not over /tmp, where
this script may itself live), for torchrun's logs and the job's checkpoint; and its own
process tree, which dies with it.
"""

import argparse
import ctypes
import importlib.metadata
import json
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

# code/, one folder up, holds what every family of labs shares: pace, provenance, lab_cli,
# the launcher. Put it on the path, so this script runs from any folder.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import pace  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
FIRST_JOB = HERE.parent / "first_job" / "train_ddp.py"  # chapter 1's script, launched as it is
HOST = "trainer.invalid"  # .invalid is reserved (RFC 2606): no resolver ever answers for it
WORKERS = 2
STORE_PORT = 29400  # any port: each launch has a network of its own
LAUNCHES = {
    "standalone": ["--standalone"],
    "c10d endpoint": ["--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{STORE_PORT}"],
    "static": ["--master_addr=127.0.0.1", f"--master_port={STORE_PORT}"],
    "c10d local-addr": [
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{STORE_PORT}",
        "--local-addr=127.0.0.1",
    ],
}
# The warning a worker prints each time it fails to look up the store's host. Three in a row,
# and no rank started: stalled (it would go on retrying until the rendezvous times out).
STALL = re.compile(r"\[c10d\] The IPv6 network addresses of \(.*\) cannot be retrieved.*")
STALL_REPEATS = 3


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=pathlib.Path, help="also write every result to this file")
    args = parser.parse_args()
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json: no folder {args.json.parent}")
    return args


def die_with_parent():
    """In the child, before exec: the kernel kills it if this script dies, SIGKILL included.
    Its own child (unshare --kill-child) then takes the launch's whole process tree along."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def start(flags):
    """torchrun with `flags`, in fresh namespaces where this host's name cannot resolve."""
    torchrun = pathlib.Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), *flags, f"--nproc_per_node={WORKERS}", str(FIRST_JOB)]
    inside = (
        f"ip link set lo up && hostname {HOST} && mount -t tmpfs lab-scratch /dev/shm && "
        f"cd /dev/shm && TMPDIR=/dev/shm CHECKPOINT=first_job.pt "
        f"exec {subprocess.list2cmdline(command)}"
    )
    return subprocess.Popen(
        ["unshare", "--uts", "--net", "--mount", "--pid", "--fork", "--kill-child"]
        + ["sh", "-c", inside],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=die_with_parent,
    )


def launch(name, flags, deadline_s):
    """Run one launch until it ends, stalls, or reaches its deadline; what it showed."""
    started = time.monotonic()
    process = start(flags)
    lines, stalls = [], []

    workers = []

    def read():
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if found := STALL.search(line):
                stalls.append(found.group(0))
                if len(stalls) == STALL_REPEATS:
                    workers.extend(workers_under(process.pid))
                    process.kill()  # unshare: --kill-child ends the launch's whole tree

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = process.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait()
    reader.join()
    seconds = time.monotonic() - started
    if len(stalls) >= STALL_REPEATS:
        outcome = "stalled"
    elif code == 0:
        outcome = "completed"
    else:
        outcome = "failed" if seconds < deadline_s else "timed out"
    return {
        "name": name,
        "command": f"torchrun {' '.join(flags)} --nproc_per_node={WORKERS} train_ddp.py",
        "outcome": outcome,
        "seconds": seconds,
        "returncode": code,
        "stall_warnings": stalls,
        "workers_when_stopped": len(workers) if outcome == "stalled" else None,
        "job_lines": [line for line in lines if job_line(line)],
    }


def workers_under(pid):
    """The PIDs of the workers below `pid`: the processes torchrun started (read from /proc)."""
    found, todo = [], [(pid, False)]
    while todo:
        parent, is_worker = todo.pop()
        try:
            children = pathlib.Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
            argv = pathlib.Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")
        except OSError:  # ended while we looked
            continue
        found += [parent] if is_worker else []
        is_agent = len(argv) > 1 and argv[1].endswith(b"torchrun")
        todo += [(int(child), is_agent) for child in children]
    return found


def job_line(line):
    """What train_ddp.py printed, without torchrun's and c10d's log lines around it."""
    return not re.match(r"\[?[WIE]\d{4} |\*{5}|\s*$", line) and "OMP_NUM_THREADS" not in line


def report(result):
    print(f"host name {result['host']}, socket.getfqdn() -> {result['fqdn']}")
    for run in result["launches"]:
        print(f"\n$ {run['command']}")
        for warning in run["stall_warnings"][:1]:
            print(f"  {warning}")
        if run["outcome"] == "stalled":
            print(
                f"  ... {len(run['stall_warnings'])} such warnings in {run['seconds']:.1f} s; "
                f"workers started: {run['workers_when_stopped']}. Stalled, stopped."
            )
        else:  # a failed launch shows more: what went wrong is not taught here
            for line in run["job_lines"][-2 if run["outcome"] == "completed" else -12 :]:
                print(f"  {line}")
            print(f"  {run['outcome']} in {run['seconds']:.1f} s")


def main():
    args = parse_args()
    deadline_s = pace.limit(60)
    result = {"host": HOST, "workers": WORKERS, "launches": []}
    result["fqdn"] = subprocess.run(
        [
            "unshare",
            "--uts",
            "--net",
            "sh",
            "-c",
            f"hostname {HOST} && {sys.executable} -c 'import socket; print(socket.getfqdn())'",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=deadline_s,
    ).stdout.strip()
    for name, flags in LAUNCHES.items():
        result["launches"].append(launch(name, flags, deadline_s))
    report(result)
    if args.json:
        from provenance import machine_facts  # the torch this lab's launches ran, not imported

        result["env"] = machine_facts(importlib.metadata.version("torch"))
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    # A launch that neither completed nor stalled on the name went wrong in a way not taught here.
    return 0 if all(run["outcome"] in ("completed", "stalled") for run in result["launches"]) else 1


if __name__ == "__main__":
    sys.exit(main())
