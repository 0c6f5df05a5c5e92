"""The Slurm lab, code/clusters/slurm.py: a real Slurm cluster in network namespaces.

As root with Slurm and munge installed, the lab runs once for the module and the page's
claims are checked on that run: the torchrun job and the srun job both train four ranks on
two nodes to the one-process reference; the job whose rank 3 crashes is requeued, runs
again from its checkpoint, and ends bit-identical to the uninterrupted torchrun job; the
states seen include the requeue. Then SIGKILL mid-run: no namespace, daemon, job process,
munge key, spool folder or state file of that run is left. Anywhere: bad input, a missing
root and a missing binary are refused in one line, status 2, and the page's port and
--ntasks-per-node traps hold on torch itself.
"""

import json
import os
import pathlib
import re
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from site_tests.conftest import ROOT, pace
from site_tests.tools.adopter import run_adopting

LAB = ROOT / "code" / "clusters" / "slurm.py"
RUN_TIMEOUT = 300  # seconds, at pace's reference: the lab stops itself at its 150 s deadline
IS_ROOT = os.geteuid() == 0
HAS_SLURM = all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "munged", "sbatch"))
needs_cluster = pytest.mark.skipif(
    not (IS_ROOT and HAS_SLURM),
    reason="needs root and Slurm (apt-get install slurm-wlm munge)",
)

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


def as_root(*args, env):
    """The lab with geteuid() answering 0, for the checks that come after the root one."""
    fake = f"import os, runpy, sys; os.geteuid = lambda: 0; sys.argv = [{str(LAB)!r}, *{args!r}]; "
    fake += f"runpy.run_path({str(LAB)!r}, run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", fake],
        capture_output=True,
        text=True,
        timeout=pace.limit(30),
        env=env,
    )


NSFS = os.stat("/proc/self/ns/net").st_dev  # the file system every namespace's file is on


class Namespaces:
    """The network namespaces a run with launcher `pid` has made, each held open from when it
    is first seen until close(). A namespace's inode names it only while it exists: the
    kernel gives a freed namespace's number to the next one made, here by the other release's
    run of this lab, side by side, whose processes would then pass for this run's."""

    def __init__(self, pid):
        self.prefix, self.held = f"ddpslurm-{pid}-", {}

    def names(self):
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [line.split()[0] for line in listed.splitlines() if line.startswith(self.prefix)]

    def note(self):
        for name in self.names():
            if name in self.held:
                continue
            try:
                fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
            except OSError:  # deleted since it was listed
                continue
            if os.fstat(fd).st_dev == NSFS:
                self.held[name] = fd
            else:  # the name's empty file, before `ip netns add` mounts the namespace on it
                os.close(fd)
        return self

    def inodes(self):
        return {os.fstat(fd).st_ino for fd in self.held.values()}

    def close(self):
        for fd in self.held.values():
            os.close(fd)


def leftovers(namespaces):
    """Everything a run could leave: its namespaces, any process inside one of them or
    naming the run's folder (the daemons do), the run's folder (key, spool, state)."""
    prefix, inodes = namespaces.prefix, namespaces.inodes()
    found = namespaces.names()
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid == os.getpid():
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        if prefix in cmdline or net_namespace(proc.pid) in inodes:
            found.append(f"process {proc.pid}: {cmdline[:120]}")
    found += [str(p) for p in pathlib.Path(tempfile.gettempdir()).glob(f"{prefix}*")]
    return found


def net_namespace(pid):
    """The inode of the network namespace process `pid` is in; None once it has ended (psutil
    does not say which namespace a process is in)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def wait_until_clean(namespaces, seconds=30):
    deadline = time.monotonic() + pace.limit(seconds)
    while (left := leftovers(namespaces)) and time.monotonic() < deadline:
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
        (["--deadline", "0"], "--deadline must be a positive"),
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


def test_missing_binary_is_one_line_status_2(tmp_path, torch_refuses):
    """A PATH with every tool the lab needs but munged: it names munged, and the package."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ip", "unshare", "hostname", "slurmctld", "slurmd", "sbatch", "srun"):
        (bin_dir / tool).symlink_to("/bin/true")
    for tool in ("squeue", "scontrol", "sinfo"):
        (bin_dir / tool).symlink_to("/bin/true")
    env = dict(os.environ, PATH=str(bin_dir), PYTHONPATH=str(torch_refuses))
    proc = as_root(env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "needs munged on PATH" in line and "slurm-wlm" in line, line


# ---------------------------------------------------------------------------------------------
# As root, with Slurm: one full run, read by many tests
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (IS_ROOT and HAS_SLURM):
        pytest.skip("needs root and Slurm (apt-get install slurm-wlm munge)")
    out = tmp_path_factory.mktemp("slurm") / "result.json"
    # Slurm's own ports, taken on the machine: the cluster's daemons listen inside their
    # namespaces, so a slurmctld already running on the host cannot collide with them.
    held = []
    for port in (6817, 6818):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()  # someone else holds it: the point stands either way
    seen = {}

    def note_namespaces(pid):  # a process left in one is found whatever its command line
        seen.setdefault(pid, Namespaces(pid)).note()

    try:  # its default deadline, as a reader runs it
        code, pid, stdout, stderr, orphans = run_adopting(
            [sys.executable, str(LAB), "--json", str(out)],
            out,
            ROOT,
            pace.limit(RUN_TIMEOUT),
            note_namespaces,
        )
        # looked at the moment the lab returned: nothing of its cluster may still be going
        left = [*orphans, *leftovers(seen.get(pid, Namespaces(pid)))]
    finally:
        for sock in held:
            sock.close()
        for namespaces in seen.values():
            namespaces.close()
    assert code == 0, stdout + stderr[-4000:]
    return {"result": json.loads(out.read_text()), "stdout": stdout, "left_at_exit": left}


def check_four_ranks(job):
    rows = job["ranks"]
    assert [row["rank"] for row in rows] == [0, 1, 2, 3], rows
    assert [row["group_rank"] for row in rows] == [0, 0, 1, 1]  # two ranks per node
    assert [row["local_rank"] for row in rows] == [0, 1, 0, 1]
    assert all(row["world"] == 4 for row in rows)


def test_torchrun_job_runs_one_launcher_per_node(run):
    job = run["result"]["jobs"]["torchrun"]
    assert job["state"] == "COMPLETED" and job["exit_code"] == "0:0"
    assert job["show_job"]["NumNodes"] == "2" and job["show_job"]["NumTasks"] == "2"
    assert job["show_job"]["NodeList"] == "node[0-1]"
    check_four_ranks(job)
    assert "rendezvous node0:" in job["log"]


def test_srun_job_runs_one_task_per_rank(run):
    job = run["result"]["jobs"]["srun"]
    assert job["state"] == "COMPLETED" and job["exit_code"] == "0:0"
    assert job["show_job"]["NumTasks"] == "4"
    check_four_ranks(job)


def test_slurm_hands_out_the_gpus_each_job_script_asks_for(run):
    """The nodes' placeholder GPUs are allocated as real ones are: all of a node's share to
    its torchrun task, one to each srun task; CUDA finds none, and the ranks train on CPU."""
    r = run["result"]
    assert [line.split()[-1] for line in r["sinfo"].splitlines()] == ["GRES", "gpu:4", "gpu:4"]
    torchrun, srun = r["jobs"]["torchrun"], r["jobs"]["srun"]
    assert torchrun["show_job"]["TresPerNode"].endswith("gpu:2"), torchrun["show_job"]
    assert srun["show_job"]["TresPerTask"].endswith("gpu:1"), srun["show_job"]
    assert [(t["host"], t["gpus_on_node"]) for t in torchrun["tasks"]] == [
        ("node0", "2"),
        ("node1", "2"),
    ], torchrun["tasks"]
    assert [t["host"] for t in srun["tasks"]] == ["node0", "node0", "node1", "node1"]
    # Which job Slurm places first decides who gets GPUs 0 and 1: the two run at once on each
    # node (test_two_jobs_share_both_nodes...), so each holds its own two of the node's four.
    for node in ("node0", "node1"):
        (whole,) = [t["visible"].split(",") for t in torchrun["tasks"] if t["host"] == node]
        each = [t["visible"] for t in srun["tasks"] if t["host"] == node]
        assert len(set(whole)) == 2 and len(set(each)) == 2, (torchrun["tasks"], srun["tasks"])
        assert sorted(whole + each) == ["0", "1", "2", "3"], (torchrun["tasks"], srun["tasks"])
    for job in (torchrun, srun):
        assert {t["interface"] for t in job["tasks"]} == {"eth0"}, job["tasks"]
        assert {row["device"] for row in job["ranks"]} == {"cpu"}


def test_two_jobs_share_both_nodes_on_ports_from_their_ids(run):
    """No fixed port: the torchrun and srun jobs run at once on the same two nodes, each at
    the port its job id gives, and both complete."""
    r = run["result"]
    rows = [line.split() for line in r["squeue"].splitlines()[1:]]
    together = {row[0]: row[-1] for row in rows if row[4] == "R"}
    ports = {}
    for name, pattern in (("torchrun", r"rendezvous node0:(\d+)"), ("srun", r"store node0:(\d+)")):
        job = r["jobs"][name]
        assert together[job["id"]] == "node[0-1]" and job["state"] == "COMPLETED", r["squeue"]
        (port,) = set(re.findall(pattern, job["log"]))
        ports[name] = int(port)
        assert ports[name] == 20000 + int(job["id"]) % 10000
    assert ports["torchrun"] != ports["srun"]


def test_a_completed_jobs_log_leaves_out_python_and_cpp_tracebacks():
    lab = runpy.run_path(str(LAB))
    log = [
        "job 2 on node[0-1], rendezvous node0:20002, restart 0",
        "node0 task 0: interface eth0, SLURM_GPUS_ON_NODE=2 CUDA_VISIBLE_DEVICES=0,1",
        "[W1206 06:29:57.466 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on x",
        "Exception raised from recvBytes at Utils.hpp:786 (most recent call first):",
        "frame #0: c10::Error::Error() + 0x9d (0x7f5e in libc10.so)",
        "<omitting python frames>",
        "frame #29: _start + 0x21 (0x5639 in python)",
        "",
        "W1206 06:29:57.744000 4939 torch/distributed/elastic/rendezvous/api.py:1] failed",
        "Trace" + "back (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "RendezvousConnectionError: the store went away",
        "node1 task 1: interface eth0, SLURM_GPUS_ON_NODE=2 CUDA_VISIBLE_DEVICES=0,1",
        # another agent's traceback, glued to the end of a line it interrupted
        "W1206 06:29:58.1 4940 torch/distributed/elastic/agent/api.py:2] stopTrace"
        + "back (most recent call last):",
        '  File "y.py", line 2, in <module>',
        "node1 task 1: the end",
    ]
    kept, dropped = lab["without_tracebacks"](log)
    assert kept == [log[0], log[1], log[12], log[-1]], kept
    assert dropped == len(log) - 4


def test_two_tasks_per_node_start_a_launcher_line_twice_on_each_node(run):
    ntasks = run["result"]["ntasks"]
    assert ntasks["lines"] == ["0: node0", "1: node0", "2: node1", "3: node1"], ntasks


def test_both_ways_match_the_reference(run):
    r = run["result"]
    # float64, the same examples per step: DDP's average and one process differ by rounding
    assert r["reference_max_abs_diff"] < 1e-12
    assert r["jobs"]["torchrun"]["params"] and r["jobs"]["srun"]["params"]


def test_requeued_job_resumes_bit_identical(run):
    r = run["result"]
    job, requeue = r["jobs"]["requeue"], r["requeue"]
    assert job["state"] == "COMPLETED" and job["restarts"] == 1
    assert requeue["crash_step"] == 4
    # the first run started fresh; the second resumed from step 3, saved before the crash
    assert requeue["resume_steps"] == [0, 3]
    assert r["requeue_bit_identical"] is True
    assert job["params"] == r["jobs"]["torchrun"]["params"]
    assert 0 < r["crash_to_resumed_s"] < pace.limit(RUN_TIMEOUT)
    assert "restart 0" in job["log"] and "restart 1" in job["log"]  # one log, both runs


def first_look(changes, job_id, states):
    """The number of the watcher's first look that saw `job_id` in one of `states`."""
    return next(c["look"] for c in changes if c["job"] == job_id and c.get("state") in states)


def test_the_dependent_job_waits_for_the_first(run):
    """What holds in every order Slurm allows: a new job may first be listed as waiting for
    Resources, and its Dependency named only when the scheduler next looks at it. The first
    job is held until the watcher has seen the Dependency, so it is seen on any machine."""
    r = run["result"]
    first, dependent = r["jobs"]["torchrun"]["id"], r["jobs"]["requeue"]["id"]
    changes = r["states"]
    mine = [c for c in changes if c["job"] == dependent and "state" in c]
    assert mine[0]["state"] == "PENDING", mine
    running = first_look(changes, dependent, {"RUNNING"})
    before = [c["reason"] for c in mine if c["look"] < running]
    assert "Dependency" in before, mine
    # never running in a look that still saw the first job unfinished (COMPLETING: its
    # processes are ending, and Slurm counts it as ended for afterany)
    assert first_look(changes, first, {"COMPLETING", "COMPLETED"}) <= running, changes
    # released only after the wait was seen: the lab's note comes after that change
    seen = next(c["t"] for c in mine if c["reason"] == "Dependency")
    (released,) = [c["t"] for c in changes if c.get("action") == r["release"]]
    assert r["release"] == f"scontrol release {first}" and seen < released
    assert r["jobs"]["torchrun"]["sbatch"].startswith("sbatch --hold ")
    (row,) = [line.split() for line in r["squeue"].splitlines() if line.split()[0] == dependent]
    assert row[4] == "PD" and row[-1] == "(Dependency)", r["squeue"]


def test_states_seen_include_the_requeue(run):
    r = run["result"]
    job_id = r["jobs"]["requeue"]["id"]
    mine = [s for s in r["states"] if s["job"] == job_id and "state" in s]
    states = [s["state"] for s in mine]
    assert states[-1] == "COMPLETED"
    # RUNNING, FAILED, then pending again with one restart counted, then RUNNING again
    failed = states.index("FAILED")
    again = next(i for i, s in enumerate(mine) if s["restarts"] == 1)
    assert "RUNNING" in states[:failed] and failed < again
    assert states[again] == "PENDING" and "RUNNING" in states[again:]
    timeline = [row["what"] for row in r["requeue"]["timeline"]]
    assert any(re.search(rf"Requeuing JobId={job_id}\b", w) for w in timeline), timeline
    times = [row["t_s"] for row in r["requeue"]["timeline"]]
    assert times == sorted(times)
    assert r["requeue"]["hold"]["reason"] == "BeginTime" and r["requeue"]["hold"]["hold_s"] > 0


def test_output_is_buffered_unless_export_passes_pythonunbuffered(run):
    plain, unbuffered = (run["result"]["buffering"][k] for k in ("plain", "unbuffered"))
    assert "--export" not in plain["sbatch"]
    assert "--export=ALL,PYTHONUNBUFFERED=1" in unbuffered["sbatch"]
    # the same line printed at the start: only the unbuffered job's log shows it at once
    assert plain["while_running"] == "" and unbuffered["while_running"].strip()
    assert plain["after"].strip() and plain["after"].count("\n") == 1


def test_slurm_conf_is_the_one_the_page_describes(run):
    conf = run["result"]["slurm_conf"]
    for line in (
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "AuthType=auth/munge",
        "JobAcctGatherType=jobacct_gather/none",
        "ReturnToService=2",
        "SlurmdSpoolDir=$TMP/spool/%n",
    ):
        assert line in conf.splitlines(), line
    assert "cgroup" not in conf.replace("no cgroups", "").lower()
    for addr in run["result"]["cluster"]["hosts"].values():
        assert addr.startswith("198.18."), addr


def test_report_blocks(run):
    headers = re.findall(r"^== ([\w-]+) ==$", run["stdout"], re.MULTILINE)
    assert headers == [
        "cluster",
        "ntasks",
        "torchrun",
        "srun",
        "squeue",
        "torchrun-result",
        "srun-result",
        "buffering",
        "requeue",
    ]
    assert all(len(line) <= 88 for line in run["stdout"].splitlines())


def test_full_run_leaves_nothing_when_it_returns(run):
    assert run["left_at_exit"] == []


@pytest.mark.skipif(not IS_ROOT, reason="needs root to make network namespaces")
def test_a_namespace_held_keeps_its_number_from_the_next_one_made():
    """Why Namespaces holds what it has seen: once a namespace is freed, the next one made
    soon takes its inode (about a second later, measured), and any process in that one would
    be counted as this run's leftover. Held, the number stays taken however many are made."""
    ours = Namespaces(f"test{os.getpid()}")
    name, other = f"{ours.prefix}node0", f"ddpslurm-other{os.getpid()}-node0"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        taken = ours.note().inodes()
        assert len(taken) == 1, "the namespace was not held"
        subprocess.run(["ip", "netns", "delete", name], check=True)
        deadline = time.monotonic() + pace.limit(3)
        while time.monotonic() < deadline:  # other runs make namespaces meanwhile
            subprocess.run(["ip", "netns", "add", other], check=True)
            reused = os.stat(f"/run/netns/{other}").st_ino in taken
            subprocess.run(["ip", "netns", "delete", other], check=True)
            assert not reused, "a namespace made later passes for one of the run's"
            time.sleep(0.2)
    finally:
        ours.close()
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


# ---------------------------------------------------------------------------------------------
# As root, with Slurm: SIGKILL while jobs run
# ---------------------------------------------------------------------------------------------
def job_step_running(namespaces):
    """A slurmstepd (a job's step) is running inside one of the run's namespaces."""
    return any("slurmstepd" in item for item in leftovers(namespaces))


@needs_cluster
def test_sigkill_mid_run_leaves_nothing():
    proc = subprocess.Popen(
        [sys.executable, str(LAB)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + pace.limit(60)
    namespaces = Namespaces(proc.pid)
    try:
        while time.monotonic() < deadline:
            if len(namespaces.note().held) == 4 and job_step_running(namespaces):
                break
            time.sleep(0.2)
        else:
            proc.kill()
            pytest.fail("the lab's jobs never started")
        left = leftovers(namespaces)
        assert any("slurmctld" in s for s in left) and any("munged" in s for s in left)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=pace.limit(30))
        assert wait_until_clean(namespaces) == []
    finally:
        namespaces.close()


def test_a_second_rendezvous_on_a_taken_port_joins_the_store_holding_it():
    """The page's port trap, asserted on torch itself: torchrun's c10d rendezvous finds its
    port taken on its own host and, instead of failing, becomes a client of whatever store
    holds the port, here one that a first job owns."""
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

    first_job = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    first_job.set("owner", "the first job")
    second = RendezvousParameters("c10d", f"127.0.0.1:{first_job.port}", "job-2", 1, 1)
    _, store = create_backend(second)
    assert store.get("owner") == b"the first job", "the second job hosts a store of its own"


# A rank that reports its place, then works long enough for the surplus agents, started
# with the job's second agent, to knock before the job ends: a surplus agent that came
# after the job's store was gone would host one of its own, and two late ones would form
# a second job.
SURPLUS_WORKER = """
import os, sys, time
print(os.environ["RANK"], os.environ["WORLD_SIZE"], flush=True)
time.sleep(float(sys.argv[1]))
"""


def listening(port):
    with socket.socket() as client:
        return client.connect_ex(("127.0.0.1", port)) == 0


def test_surplus_torchrun_agents_never_train_and_never_succeed(tmp_path):
    """The page's --ntasks-per-node trap, asserted on torch itself: four torchrun agents
    for --nnodes=2 (what two tasks per node give the torchrun script on two nodes). The
    first two to join form the job and train with a world of two. The other two get no
    place, and end with an error once the job ends, whichever way the end reaches them
    (the store gone with the job's agents, the rendezvous closed, or a store of their own
    that times out: it varies with timing and release); neither trains, neither exits 0."""
    worker = tmp_path / "worker.py"
    worker.write_text(SURPLUS_WORKER)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    join_timeout = round(pace.limit(20))  # bounds the wait of a surplus agent that hosts
    agent = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2"]
    agent += ["--nproc_per_node=1", "--rdzv_backend=c10d", f"--rdzv_id=surplus-{port}"]
    agent += [f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_conf=join_timeout={join_timeout}"]
    agent += ["--max_restarts=0", str(worker), str(pace.limit(5))]

    def start():
        return subprocess.Popen(agent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # The first agent holds the store, as the first to start on the head node does.
    agents = [start()]
    try:
        deadline = time.monotonic() + pace.limit(30)
        while not listening(port):
            assert agents[0].poll() is None, agents[0].communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the first agent never opened its store"
            time.sleep(0.1)
        agents += [start() for _ in range(3)]
        ended = [(*proc.communicate(timeout=pace.limit(90)), proc.returncode) for proc in agents]
    finally:
        for proc in agents:  # a worker orphaned here ends by itself after its sleep
            proc.kill()
            proc.communicate()
    codes = [code for _, _, code in ended]
    assert codes[0] == 0 and codes.count(0) == 2, [err[-600:] for _, err, _ in ended]
    assert sorted(out.strip() for out, _, code in ended if code == 0) == ["0 2", "1 2"]
    assert [out for out, _, code in ended if code != 0] == ["", ""], "a surplus agent trained"
