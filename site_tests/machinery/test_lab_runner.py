"""hooks/labrunner.py: one run per lab among processes that share a cache, a record that says
what the run left behind, and GPU runs recorded only where there is a GPU. The labs here are a
few lines of plain Python, no torch."""

import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

from site_tests.conftest import ROOT, alive, labrunner, pace

# A lab that notes each start in RUNS_LOG, then holds until the file RELEASE exists (HOLD_S at
# most, so that a failed test leaves nothing behind): the test, not a clock, says when it ends.
COUNTED = """
import json, os, sys, time
with open(os.environ["RUNS_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")
deadline = time.monotonic() + float(os.environ["HOLD_S"])
while not os.path.exists(os.environ["RELEASE"]) and time.monotonic() < deadline:
    time.sleep(0.01)
with open(sys.argv[sys.argv.index("--json") + 1], "w") as out:
    json.dump({"pid": os.getpid()}, out)
"""
# What each asking process runs: the record of the same run, from the same cache.
ASK = """
import pathlib, sys
import labrunner
run = labrunner.LabRun("counted", {"script": "lab.py"}, pathlib.Path(sys.argv[1]))
print(labrunner.load_record(run, pathlib.Path(sys.argv[2]))["result"]["pid"])
"""


def test_processes_sharing_a_cache_run_a_lab_once(tmp_path):
    """The second asker comes while the first one's run is under way, every time: the lab holds
    until the second is seen waiting for the lock (or starting a run of its own, the bug this
    test is for), and only then is let go. Both must answer with the one run's record."""
    (tmp_path / "lab.py").write_text(COUNTED)
    runs_log, cache, release = tmp_path / "runs.log", tmp_path / "cache", tmp_path / "release"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT / "hooks"),
        RUNS_LOG=str(runs_log),
        RELEASE=str(release),
        HOLD_S=str(pace.limit(120)),
    )
    askers = []

    def first_has_started():
        return starts(runs_log) or askers[0].poll() is not None

    def second_has_come():  # the first run holds the lock: it waits, unless the lock fails
        waiting = blocked_on_a_lock(askers[1].pid, cache)
        return waiting or len(starts(runs_log)) > 1 or askers[1].poll() is not None

    try:
        askers.append(ask(tmp_path, cache, env))
        wait_for(first_has_started, "the first run")
        askers.append(ask(tmp_path, cache, env))
        wait_for(second_has_come, "the second asker to wait for the lock")
    finally:
        release.touch()  # whatever happened: the held lab may end now
    answers = [asker.communicate(timeout=pace.limit(30)) for asker in askers]
    assert [asker.returncode for asker in askers] == [0, 0], answers
    ran = starts(runs_log)  # one start, though the second asked while it ran
    assert len(ran) == 1, f"two askers of one cache started the lab {len(ran)} times"
    assert [out.strip() for out, _ in answers] == ran * 2


def ask(folder, cache, env):
    """A process that asks for the record of folder/lab.py's run from `cache`."""
    return subprocess.Popen(
        [sys.executable, "-c", ASK, str(folder), str(cache)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def starts(runs_log):
    """The pids of the lab's starts so far."""
    return runs_log.read_text().split() if runs_log.exists() else []


def blocked_on_a_lock(pid, cache):
    """Whether process `pid` waits for a lock held on a lab's lock file in `cache`."""
    inodes = {path.stat().st_ino for path in cache.glob("*/.lock")}
    return any(waiter == (pid, inode) for waiter in lock_waiters() for inode in inodes)


def lock_waiters():
    """(pid, inode) of every process waiting for a file lock: Linux's /proc/locks lists each
    waiter after "->", with its pid and the file's device:inode. psutil knows nothing of
    locks, so this one reads /proc itself."""
    for line in pathlib.Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[1] == "->":
            yield int(fields[5]), int(fields[6].rsplit(":", 1)[-1])


def wait_for(condition, what, seconds=30):
    """Poll `condition` until it holds; fail after `seconds` (at this machine's pace)."""
    deadline = time.monotonic() + pace.limit(seconds)
    while not condition():
        assert time.monotonic() < deadline, f"waited {pace.limit(seconds):.0f} s for {what}"
        time.sleep(0.01)


# A lab that leaves a process running, a file in its TMPDIR and torch's own cache folder.
LEAVER = """
import json, os, subprocess, sys, tempfile
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
child = subprocess.Popen(sleep, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
tmp = tempfile.gettempdir()
open(os.path.join(tmp, "stray.txt"), "w").close()
os.mkdir(os.path.join(tmp, "torchinductor_reader"))
with open(sys.argv[sys.argv.index("--json") + 1], "w") as out:
    json.dump({"child": child.pid}, out)
"""


def test_the_record_names_what_the_run_left_and_the_runner_ends_it(tmp_path):
    (tmp_path / "lab.py").write_text(LEAVER)
    record = labrunner.execute(labrunner.LabRun("leaver", {"script": "lab.py"}, tmp_path))
    child = record["result"]["child"]
    assert record["left_processes"] == [child]
    assert record["left_files"] == ["stray.txt"]  # torch's own folder is not the lab's
    assert not alive(child), "the runner left the lab's process running"


# A lab whose leftover keeps the lab's own stdout and stderr open, as a forked worker does.
HOLDER = """
import json, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("done", flush=True)
with open(sys.argv[sys.argv.index("--json") + 1], "w") as out:
    json.dump({"child": child.pid}, out)
"""


def test_a_process_left_holding_the_output_does_not_hold_the_run(tmp_path):
    """Read through pipes, a lab's output ends only when every process holding the pipes
    has: one left behind kept a finished run waiting until its timeout, which then failed."""
    (tmp_path / "lab.py").write_text(HOLDER)
    run = labrunner.LabRun("holder", {"script": "lab.py", "timeout": 60}, tmp_path)
    started = time.monotonic()
    record = labrunner.execute(run)
    assert time.monotonic() - started < pace.limit(30), "the run waited for its leftover"
    assert record["left_processes"] == [record["result"]["child"]]
    assert record["stdout"] == "done\n"


# ---------------------------------------------------------------------------------------------
# GPU runs: recorded by `nox -s record-gpu`, on a GPU machine only
# ---------------------------------------------------------------------------------------------
def declared_runs():
    import yaml

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    runs = config["extra"]["lab_runs"]
    return {name: labrunner.LabRun(name, spec, ROOT) for name, spec in runs.items()}


def test_record_gpu_records_every_run_that_needs_a_gpu():
    noxfile = (ROOT / "noxfile.py").read_text()
    (listed,) = re.findall(r"^GPU_RUNS = \(([^)]*)\)", noxfile, re.MULTILINE)
    needs_gpu = {name for name, run in declared_runs().items() if run.needs_gpu}
    assert {"nccl", "first-job-gpu", "elastic-gpu"} <= needs_gpu
    assert set(re.findall(r'"([\w-]+)"', listed)) == needs_gpu


def test_a_gpu_run_is_not_recorded_on_a_machine_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: its recording would be a real one")
    run = declared_runs()["elastic-gpu"]
    assert run.needs_gpu and not run.record_file.exists()
    done = subprocess.run(
        [sys.executable, str(ROOT / "hooks" / "labrunner.py"), "record", "elastic-gpu"],
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
    )
    assert done.returncode != 0 and "no CUDA device here" in done.stderr, done.stderr
    assert not run.record_file.exists(), "a CPU run was written as the GPU record"
