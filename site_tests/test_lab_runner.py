"""hooks/labrunner.py: one run per lab among processes that share a cache, and a record that says
what the run left behind. The labs here are a few lines of plain Python, no torch."""

import os
import pathlib
import subprocess
import sys

from site_tests.conftest import ROOT, labrunner, pace

# A lab that notes each start in RUNS_LOG, then holds for HOLD_S seconds, so that a second
# process asking for its record arrives while it runs.
COUNTED = """
import json, os, sys, time
with open(os.environ["RUNS_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")
time.sleep(float(os.environ["HOLD_S"]))
with open(sys.argv[sys.argv.index("--json") + 1], "w") as out:
    json.dump({"pid": os.getpid()}, out)
"""
# What a second process runs: the record of the same run, from the same cache.
ASK = """
import pathlib, sys
import labrunner
run = labrunner.LabRun("counted", {"script": "lab.py"}, pathlib.Path(sys.argv[1]))
print(labrunner.load_record(run, pathlib.Path(sys.argv[2]))["result"]["pid"])
"""


def test_processes_sharing_a_cache_run_a_lab_once(tmp_path):
    (tmp_path / "lab.py").write_text(COUNTED)
    runs_log, cache = tmp_path / "runs.log", tmp_path / "cache"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT / "hooks"),
        RUNS_LOG=str(runs_log),
        HOLD_S=str(pace.limit(1)),
    )
    askers = [
        subprocess.Popen(
            [sys.executable, "-c", ASK, str(tmp_path), str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    answers = [asker.communicate(timeout=pace.limit(30)) for asker in askers]
    assert [asker.returncode for asker in askers] == [0, 0], answers
    (ran,) = runs_log.read_text().split()  # one start, however the two met
    assert [out.strip() for out, _ in answers] == [ran, ran]


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


def alive(pid):
    """Whether `pid` is a live process (a zombie is not)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
