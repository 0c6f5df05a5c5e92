"""The two-node lab, code/clusters/two_nodes.py: torchrun across network namespaces, for real.

As root (the build machines and CI), the lab runs once for the module and every claim its page
makes is checked on that run: four ranks on two nodes match the one-process reference; the
elastic restart resumes from the checkpoint and ends bit-identical to the uninterrupted run;
the interface trap fails with the loopback address in gloo's error; an outsider reads and
writes the store until a firewall rule shuts it out. Then the endings: a rendezvous that never
completes, SIGTERM and SIGKILL mid-run; after each, no namespace, veth, process or temp dir of
that run is left. Anywhere: bad input and a missing root are refused in one line, status 2.
"""

import importlib.util
import io
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from site_tests.conftest import ROOT, pace, processes_naming
from site_tests.tools.adopter import run_adopting

LAB = ROOT / "code" / "clusters" / "two_nodes.py"
TRAINER = ROOT / "code" / "clusters" / "elastic_train.py"
RUN_TIMEOUT = 300  # seconds, at pace's reference: the lab stops itself at its 150 s deadline
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="network namespaces need root")

pytestmark = pytest.mark.timeout(2 * RUN_TIMEOUT)


def lab(*args, env=None, timeout=RUN_TIMEOUT):
    return subprocess.run(
        [sys.executable, str(LAB), *args],
        capture_output=True,
        text=True,
        timeout=pace.limit(timeout),
        env=env,
        cwd=ROOT,
    )


def lab_processes(pid):
    """(pid, argv) of every process whose command line names the run with launcher `pid`."""
    return processes_naming(f"ddp2n-{pid}-").items()


def leftovers(pid):
    """Everything a run with launcher `pid` could leave: namespaces, processes, temp dirs."""
    prefix = f"ddp2n-{pid}-"
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found = [line.split()[0] for line in names.splitlines() if line.startswith(prefix)]
    found += [f"process {p}: {' '.join(argv)[:120]}" for p, argv in lab_processes(pid)]
    found += [str(p) for p in pathlib.Path(tempfile.gettempdir()).glob(f"{prefix}*")]
    return found


def is_worker(argv):
    """A worker that an agent started: Python running the trainer. An agent's command line
    names the trainer too, after torchrun, and so does the wrapper that starts the agent."""
    names_trainer = any(word.endswith(TRAINER.name) for word in argv)
    return names_trainer and not any(word.endswith("torchrun") for word in argv)


def our_links():
    """Links in the machine's own namespace that the lab would have made, were it to leak."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [ln for ln in links.splitlines() if re.search(r": (node\d|outsider|br0)[@:]", ln)]


def wait_until_clean(pid, seconds=30):
    deadline = time.monotonic() + pace.limit(seconds)
    while (left := leftovers(pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


# ---------------------------------------------------------------------------------------------
# Anywhere
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "1"], "--steps must be at least 2"),
        (["--crash-at-step", "9"], "--crash-at-step must be between 2"),
        (["--join-timeout", "0"], "--join-timeout must be a positive"),
        (["--nodes-up", "3"], "invalid choice"),
        (["--json", "/no/such/dir/r.json"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_before_torch(args, message, torch_refuses):
    env = dict(os.environ, PYTHONPATH=str(torch_refuses))
    proc = lab(*args, env=env, timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert message in line and "Traceback" not in line


def test_not_root_is_one_line_status_2(torch_refuses):
    """geteuid is made to answer 1000: the lab must refuse before touching anything."""
    fake = f"import os, runpy, sys; os.geteuid = lambda: 1000; sys.argv = [{str(LAB)!r}]; "
    fake += f"runpy.run_path({str(LAB)!r}, run_name='__main__')"
    env = dict(os.environ, PYTHONPATH=str(torch_refuses))
    proc = subprocess.run(
        [sys.executable, "-c", fake],
        capture_output=True,
        text=True,
        timeout=pace.limit(30),
        env=env,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert "needs root" in line


class WriteRecorder(io.StringIO):
    """A stdout that remembers each write call: the unit the OS keeps whole."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def write(self, text):
        self.calls.append(text)
        return super().write(text)


def test_a_rank_report_is_one_write(monkeypatch):
    """The ranks of a node share a log, and the launcher parses it line by line. A report
    made of two writes (text, then newline) let another rank's line in between: CI once
    read two reports on one line and the lab failed."""
    spec = importlib.util.spec_from_file_location("elastic_under_test", TRAINER)
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)
    out = WriteRecorder()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setenv("RANK", "3")
    trainer.report("step", step=2, loss=0.5)
    (call,) = out.calls
    assert call.startswith("@@ ") and call.endswith("\n") and call.count("\n") == 1
    report = json.loads(call[3:])
    assert (report["event"], report["rank"], report["step"]) == ("step", 3, 2)


# ---------------------------------------------------------------------------------------------
# As root: one full run, read by many tests
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not IS_ROOT:
        pytest.skip("network namespaces need root")
    out = tmp_path_factory.mktemp("two-nodes") / "result.json"
    before = our_links()
    code, pid, stdout, stderr, orphans = run_adopting(  # its default deadline, as a reader runs it
        [sys.executable, str(LAB), "--json", str(out)], out, ROOT, pace.limit(RUN_TIMEOUT)
    )
    # looked at the moment the lab returned: nothing of its nodes may still be going
    left = [*orphans, *leftovers(pid)]
    assert code == 0, stdout + stderr[-4000:]
    assert "Traceback" not in stdout
    result = json.loads(out.read_text())
    return {"result": result, "stdout": stdout, "links_before": before, "left_at_exit": left}


def test_four_ranks_on_two_nodes_match_the_reference(run):
    r = run["result"]
    rows = r["parts"]["train"]["ranks"]
    assert [row["rank"] for row in rows] == [0, 1, 2, 3]
    by_node = {node: [row for row in rows if row["node"] == node] for node in ("node0", "node1")}
    assert all(len(ranks) == 2 for ranks in by_node.values()), rows
    for ranks in by_node.values():
        assert sorted(row["local_rank"] for row in ranks) == [0, 1]
        assert len({row["group_rank"] for row in ranks}) == 1  # one GROUP_RANK per node
    assert {by_node[n][0]["group_rank"] for n in by_node} == {0, 1}
    assert all(row["world"] == 4 for row in rows)
    # float64, 6 steps: the DDP average and the one-process mean differ by rounding only
    assert r["reference_max_abs_diff"] < 1e-12


def test_restart_resumes_from_the_checkpoint_bit_identical(run):
    r = run["result"]
    restart = r["parts"]["restart"]
    assert restart["exit_codes"] == {"node0": 0, "node1": 0}
    assert restart["crash_step"] == 4
    # rank 0 saved the step before the crash; every restarted rank resumed from it
    assert restart["resume_steps"] == [3]
    assert restart["restarted_ranks"] == [0, 1, 2, 3]
    # node 1's agent counts a failure; node 0's may restart for the membership change (0)
    assert restart["restart_count_by_node"]["node1"] == 1
    assert restart["restart_count_by_node"]["node0"] in (0, 1)
    assert r["restart_bit_identical"] is True
    assert restart["params"] == r["parts"]["train"]["params"]
    times = [row["t_s"] for row in restart["timeline"]]
    assert times == sorted(times) and restart["crash_to_resumed_s"] > 0
    assert_timeline_follows_causes(restart["timeline"])
    assert "+ 0.00 s  node1  rank 3 crashes at step 4" in run["stdout"]


def timeline_kind(what):
    """What a row of the restart timeline tells: the crash, an agent's decision to restart,
    a node's workers starting again, or a step of the resumed run."""
    if what.startswith("agent: "):
        return "agent"
    if what.startswith("workers start again"):
        return "workers"
    if what.startswith("rank "):
        return "crash"
    return "step" if re.fullmatch(r"step \d+ done", what) else what


def assert_timeline_follows_causes(timeline):
    """The rows in the order that every run has them: the crash first; on each node, its
    agent's one decision to restart before its workers start again; last, a step of the
    resumed run, which needs every restarted rank. The two nodes' rows are not compared with
    each other: node 0's workers may fail on the dead peer, and its agent act (counting a
    failure), before node 1's agent has looked."""
    kinds = [timeline_kind(row["what"]) for row in timeline]
    assert kinds[0] == "crash" and kinds[-1] == "step", timeline
    for node in ("node0", "node1"):
        mine = [timeline_kind(row["what"]) for row in timeline if row["node"] == node]
        assert mine.count("agent") == 1 and mine.count("workers") == 1, (node, timeline)
        assert mine.index("agent") < mine.index("workers"), (node, timeline)


def test_interface_trap_fails_on_the_loopback_address(run):
    trap = run["result"]["parts"]["trap"]
    assert "127.0.1.1 node1" in trap["hosts_node1"]
    assert "GLOO_SOCKET_IFNAME" not in trap["command_node1"]
    assert trap["failed"] and any(code != 0 for code in trap["exit_codes"].values())
    assert "127.0.1.1" in trap["error"] and "connectFullMesh" in trap["error"]
    # and the jobs that set the variable, with the same hosts file, trained
    assert "GLOO_SOCKET_IFNAME=eth0" in run["result"]["parts"]["train"]["command"]


def test_store_is_open_until_the_firewall_rule(run):
    store = run["result"]["parts"]["store"]
    assert store["listening"] and all(
        addr.rsplit(":", 1)[0] in ("*", "0.0.0.0", "[::]") for addr in store["listening"]
    ), store["listening"]
    visit = store["visit"]
    assert visit["connected"] and visit["wrote_and_read_back"]
    assert visit["rdzv_state_is_pickle"] and visit["rdzv_state_bytes"] > 0
    assert any(key.startswith("torch.rendezvous.") for key in visit["keys"])
    # dropped, not refused: the store was still listening, the rule kept the outsider out
    assert store["after_rule"]["connected"] is False
    assert "timed out" in store["after_rule"]["error"]
    assert "drop" in store["rule"] and "198.18.1.3" not in store["rule"]
    assert store["exit_codes"] == {"node0": 0, "node1": 0}  # node 1 got through the rule


def test_report_has_one_block_per_part(run):
    headers = re.findall(r"^== (\w+) ==$", run["stdout"], re.MULTILINE)
    assert headers == ["train", "restart", "trap", "store"]


def test_addresses_stay_in_the_test_range(run):
    for cluster in run["result"]["clusters"].values():
        for addr in cluster["hosts"].values():
            assert addr.startswith("198.18."), addr


def test_full_run_leaves_nothing_when_it_returns(run):
    assert run["left_at_exit"] == []
    assert our_links() == run["links_before"]


# ---------------------------------------------------------------------------------------------
# As root: how it ends when things go wrong
# ---------------------------------------------------------------------------------------------
@needs_root
def test_hung_rendezvous_ends_at_its_timeout():
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(LAB), "--nodes-up", "1", "--join-timeout", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    stdout, stderr = proc.communicate(timeout=pace.limit(RUN_TIMEOUT))
    assert proc.returncode == 1, stdout + stderr
    last = stderr.strip().splitlines()[-1]
    assert "node 1 never joined" in last and "RendezvousTimeoutError" in last, last
    assert time.monotonic() - started < pace.limit(RUN_TIMEOUT)
    assert wait_until_clean(proc.pid) == []


def start_and_wait_for_workers(seconds=60):
    """Start the lab and return it once workers run inside the namespaces: a job's agents met
    in their rendezvous and started them, so that a kill finds agents and workers alive.

    A condition, not a pause: how long the agents take to get there depends on the machine's
    load, and a fixed sleep after the first agent appeared promised nothing.
    """
    proc = subprocess.Popen(
        [sys.executable, str(LAB)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + pace.limit(seconds)
    while time.monotonic() < deadline and proc.poll() is None:
        if any(is_worker(argv) for _, argv in lab_processes(proc.pid)):
            return proc
        time.sleep(0.2)
    why = "in time" if proc.poll() is None else f"before the lab ended ({proc.returncode})"
    proc.kill()
    proc.wait(timeout=pace.limit(30))
    pytest.fail(f"the lab's workers never started {why}")


@needs_root
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_kill_mid_run_leaves_nothing(signum):
    before = our_links()
    proc = start_and_wait_for_workers()
    assert leftovers(proc.pid), "nothing was running to kill"
    os.kill(proc.pid, signum)
    proc.wait(timeout=pace.limit(30))
    # Killed mid-run, the lab cannot succeed (SIGTERM: it stops with status 1; SIGKILL: -9).
    assert proc.returncode != 0, "the run had ended before the kill"
    assert wait_until_clean(proc.pid) == []
    assert our_links() == before
