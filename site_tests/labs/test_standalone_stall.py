"""code/debugging/standalone_stall.py: torchrun on a host whose own name does not resolve.

The lab's record (the build's, shared with this session) must show the stall the course warns
of and both fixes it recommends working: `--standalone` and c10d at a 127.0.0.1 endpoint stall
on the host's name, the static rendezvous and c10d with `--local-addr` complete. Every page
that prescribes a fix for the stall must prescribe flags of a launch that completed in that
record (chapter 6's table once prescribed the c10d endpoint, which stalls). Killed with
SIGKILL mid-launch, the lab must leave no process behind.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from site_tests.conftest import ROOT, pace, processes_naming

IS_ROOT = os.geteuid() == 0
STALL_RUN = "standalone-stall"
# Where a page prescribes a fix for the stall: the failure table's row, the cheat sheet's
# one-node block, chapter 5's section. Each (page, the text that locates the advice).
ADVICE = [
    ("docs/chapters/06-debugging.md", re.compile(r"^\|[^\n]*IPv6[^\n]*$", re.MULTILINE)),
    ("docs/cheatsheet.md", re.compile(r"^# [^\n]*stalls?[^\n]*\n(?:[^\n]+\n)+", re.MULTILINE)),
    ("docs/cheatsheet.md", re.compile(r"^`--standalone` ignores.*?\n\n", re.DOTALL | re.MULTILINE)),
    ("docs/chapters/05-launching.md", re.compile(r"Two launches do work.*?\n\n", re.DOTALL)),
]
FLAG = re.compile(r"--[a-z_-]+(?:=[\w.:<>]+)?")
RENDEZVOUS_FLAGS = {
    "--standalone",
    "--rdzv_backend",
    "--rdzv_endpoint",
    "--master_addr",
    "--master_port",
    "--local-addr",
}


def outcomes(record):
    return {run["name"]: run["outcome"] for run in record["result"]["launches"]}


def test_the_stall_and_both_fixes_are_what_the_run_shows(lab_record):
    record = lab_record(STALL_RUN)
    assert record["result"]["fqdn"] == record["result"]["host"], "the host's name resolved"
    assert outcomes(record) == {
        "standalone": "stalled",
        "c10d endpoint": "stalled",
        "static": "completed",
        "c10d local-addr": "completed",
    }
    for run in record["result"]["launches"]:
        if run["outcome"] == "stalled":  # the agent sought its own store by the host's name
            assert all(record["result"]["host"] in line for line in run["stall_warnings"])
            assert run["workers_when_stopped"] == 0, "chapter 5 says no worker is started"
        else:
            assert any("reloaded it" in line for line in run["job_lines"]), run["job_lines"]


def prescribed(text):
    """The rendezvous flags that `text` names, without their values."""
    return {flag.split("=")[0] for flag in FLAG.findall(text)} & RENDEZVOUS_FLAGS


def fixes(advice):
    """Each launch a piece of advice prescribes: a code span naming two rendezvous flags or
    more, or, in a command block, the whole command (comment lines aside)."""
    spans = [prescribed(span) for span in re.findall(r"`([^`\n]+)`", advice)]
    if not re.search(r"`[^`\n]+`", advice):
        command = "\n".join(line for line in advice.splitlines() if not line.startswith("#"))
        spans = [prescribed(command)]
    return [span for span in spans if len(span) >= 2]


def test_every_page_prescribes_a_fix_that_completed(lab_record):
    launches = lab_record(STALL_RUN)["result"]["launches"]
    worked = [prescribed(run["command"]) for run in launches if run["outcome"] == "completed"]
    stalled = [prescribed(run["command"]) for run in launches if run["outcome"] == "stalled"]
    for page, where in ADVICE:
        found = where.search((ROOT / page).read_text(encoding="utf-8"))
        assert found, f"{page}: no advice for the stall where the test looks"
        named = fixes(found.group(0))
        assert named, f"{page}: the advice names no launch"
        for fix in named:
            assert fix in worked, (
                f"{page} prescribes {sorted(fix)}, which "
                + ("stalled" if fix in stalled else "no launch ran")
                + f" in the lab; these completed: {worked}"
            )


def agents(marker):
    """The launch's torchrun: the agent, whose workers a stalled launch never starts."""
    return [
        pid
        for pid, argv in processes_naming(marker).items()
        if any(arg.endswith("torchrun") for arg in argv)
    ]


@pytest.mark.skipif(not IS_ROOT, reason="the lab needs root for its namespaces")
def test_sigkill_mid_launch_leaves_no_process(tmp_path):
    for name in ("debugging/standalone_stall.py", "first_job/train_ddp.py", "pace.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / "code" / name, tmp_path / name)
    lab = subprocess.Popen(
        [sys.executable, str(tmp_path / "debugging" / "standalone_stall.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    marker = str(tmp_path / "first_job" / "train_ddp.py")
    deadline = time.monotonic() + pace.limit(30)
    while not agents(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert agents(marker), "no launch started torchrun within the limit"
    time.sleep(1)  # into the launch: the agent is importing torch, its threads starting
    lab.send_signal(signal.SIGKILL)
    lab.wait()
    while (left := processes_naming(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes outlived the lab: {left}"
