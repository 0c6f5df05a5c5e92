"""Run a multi-host lab as a reader does, and see what it left at the moment it returned.

The lab starts under a small Python process that is a child subreaper (prctl): the lab's
orphans come to it instead of to the machine's init. So a process the lab left behind, even
one already dead but not yet collected (a zombie, which init collects when it gets to it),
is that process's child when the lab exits, and is named. The two-node and Slurm labs
promise to return only when nothing of theirs is left; test_two_nodes.py and test_slurm.py
hold them to it.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

from site_tests.conftest import ROOT, pace

# argv: code/clusters/, OUT, then the lab's command. It adopts the lab's orphans as the labs do
# (netns.adopt_orphans), writes the lab's pid to OUT.pid, then "name state" of each child
# left when the lab exits to OUT.left; then ends and collects them (netns.collect_children)
# and exits with the lab's status.
ADOPTER = """
import json, os, pathlib, subprocess, sys
import psutil
sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]  # code/clusters/, then code/
import netns
netns.adopt_orphans()
out = sys.argv[2]
lab = subprocess.Popen(sys.argv[3:])
pathlib.Path(out + ".pid").write_text(str(lab.pid))
code = lab.wait()
# A child of ours stays listed, if dead as a zombie, until we collect it: none ends as we look.
left = sorted(f"{child.name()} {child.status()}" for child in psutil.Process().children())
pathlib.Path(out + ".left").write_text(json.dumps(left))
netns.collect_children(float(os.environ["ADOPTER_CLEANUP_S"]))
sys.exit(code)
"""


def run_adopting(argv, out, cwd, limit_s, while_running=lambda pid: None):
    """Run `argv` (the lab) under the adopter, its stdout and stderr in OUT.out and OUT.err;
    call while_running(lab's pid) every half second, and kill it after `limit_s` seconds.
    Returns (status, the lab's pid, stdout, stderr, orphans at its exit)."""
    files = {name: pathlib.Path(f"{out}.{name}") for name in ("out", "err", "pid", "left")}
    with open(files["out"], "w") as stdout, open(files["err"], "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", ADOPTER, str(ROOT / "code" / "clusters"), str(out), *argv],
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=dict(os.environ, ADOPTER_CLEANUP_S=str(pace.limit(30))),
        )
    deadline = time.monotonic() + limit_s
    while proc.poll() is None:
        if files["pid"].exists() and files["pid"].read_text():
            while_running(int(files["pid"].read_text()))
        if time.monotonic() > deadline:
            proc.kill()
        time.sleep(0.5)
    orphans = json.loads(files["left"].read_text()) if files["left"].exists() else ["(killed)"]
    pid = int(files["pid"].read_text())
    return proc.returncode, pid, files["out"].read_text(), files["err"].read_text(), orphans
