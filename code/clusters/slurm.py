"""A Slurm cluster for real: DDP jobs submitted with sbatch, a failure and a requeue.
Needs root (network namespaces), iproute2, munge and Slurm (Debian: slurm-wlm).

    sudo python code/clusters/slurm.py

The cluster is three network namespaces on one machine, with the two-node lab's
addressing (netns.py): `ctl` runs slurmctld and munged and is where we type commands
(the login node), `node0` and `node1` each run one slurmd. Everything a cluster needs is
made for this run in a temporary directory: a munge key, slurm.conf, gres.conf with
placeholder GPU devices, spool, state and log folders. The folder `shared/` plays the
file system every node mounts: the job scripts, node-env.sh and elastic_train.py are
copied there, jobs are submitted from there, and their checkpoints and slurm-%j.out land
there. Slurm allocates the placeholder GPUs as real ones; CUDA finds none, and the
trainer runs on the CPU.

Three jobs, each submitted with sbatch and run by Slurm:

  torchrun  code/clusters/jobs/train-torchrun-gpu.sbatch: srun starts one torchrun per node,
            and each starts a rank per GPU of its node (two).
  srun      code/clusters/jobs/train-srun-gpu.sbatch: srun starts the four ranks itself, one
            GPU each.
  requeue   the torchrun script again; rank 3 crashes at a step, srun fails and the job
            ends FAILED; `scontrol requeue` puts it back in the queue, and it runs
            again from its checkpoint.

Before them, one interactive srun with two tasks per node shows what
--ntasks-per-node does to a launcher line: its command runs once per task.

The first two run side by side, on both nodes, at ports their job ids give; they take
every GPU, and the requeue job waits for the torchrun job (--dependency). The torchrun
job is submitted held (--hold) and released (scontrol release) once the requeue job has
been seen waiting for it, so that the wait shows on a machine of any speed. All three must
end with the parameters of the one-process reference, the requeued one bit-identical to
the torchrun job's. A watcher records each job's state as it changes.

On any ending, SIGKILL included, the guardian (netns.py) kills every daemon and job
process in the run's namespaces and removes the temporary directory, key included.
The machine check, the reference run beside the jobs and the report's wrapping are the
two-node lab's too: they live in cluster_common.py.

--json PATH writes: cluster, slurm_conf, sinfo, ntasks, jobs {torchrun, srun, requeue}
(each with its ranks and its tasks' node-env.sh lines), release, squeue, states,
reference_max_abs_diff, requeue_bit_identical, crash_to_resumed_s, env.
"""

import datetime
import json
import os
import pathlib
import re
import secrets
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time

# Its siblings here, and code/ one folder up, which holds what every family of labs shares
# (pace, provenance, lab_cli, the launcher): on the path, so that it runs from any folder.
HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
import pace  # noqa: E402
from cluster_common import (  # noqa: E402
    Reference,
    continued_lines,
    final_params,
    max_abs_diff,
    require_root_and_tools,
    say,
)
from lab_cli import OneLineParser  # noqa: E402
from netns import DEBIAN_OWN_ADDR, Cluster, Stopped, progress, run_guarded  # noqa: E402

TRAIN = HERE / "elastic_train.py"
SCRIPTS = {"torchrun": HERE / "jobs" / "train-torchrun-gpu.sbatch"}
SCRIPTS["srun"] = HERE / "jobs" / "train-srun-gpu.sbatch"
NODE_ENV = HERE / "jobs" / "node-env.sh"  # the job scripts' tasks source it
GPUS_PER_NODE = 4  # placeholders: what Slurm hands out, not what CUDA finds
PREFIX = "ddpslurm"  # every namespace and temp dir of a run is named ddpslurm-PID-...
SUBNET = "198.18.4"
HOSTS = ("ctl", "node0", "node1")
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "sinfo")
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


# -------------------------------------------------------------------------------------
# Settings
# -------------------------------------------------------------------------------------
def parse_args(argv=None):
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per job")
    parser.add_argument(
        "--crash-at-step",
        type=int,
        default=4,
        help="step at which rank 3 crashes (requeue job)",
    )
    # Written for a machine where `import torch` takes 2 s, stretched on a slower one.
    parser.add_argument(
        "--deadline",
        type=float,
        help="seconds before the whole run is stopped (default 150, at this machine's pace)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every result to PATH")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps must be at least 2, got {args.steps}")
    if not 2 <= args.crash_at_step <= args.steps:
        parser.error(f"--crash-at-step must be between 2 and --steps ({args.steps})")
    if args.deadline is not None and not args.deadline > 0:
        parser.error("--deadline must be a positive number of seconds")
    folder = os.path.dirname(os.path.abspath(args.json or "."))
    if args.json and not os.path.isdir(folder):
        parser.error(f"--json {args.json}: directory {folder!r} does not exist")
    require_root_and_tools(
        parser,
        not_root="slurm.py: needs root (network namespaces, Slurm's daemons)",
        tools=("ip", "unshare", "hostname", *DAEMONS, *CLIENTS),
        hint="Debian: apt-get install iproute2 munge slurm-wlm",
    )
    if args.deadline is None:
        args.deadline = pace.limit(150)
    return args


# -------------------------------------------------------------------------------------
# The cluster: munge, slurm.conf, the daemons
# -------------------------------------------------------------------------------------
def make_munge_key(tmp):
    """A fresh key for this run: every daemon and client of the cluster shares it, and
    it is deleted with the run's temporary directory."""
    folder = tmp / "munge"
    folder.mkdir()
    folder.chmod(0o755)  # munged wants its socket's folder open to every user
    key = folder / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)  # munged refuses a key that others may read
    return folder


def slurm_conf(tmp, cluster, munge):
    """The whole cluster's configuration. Every path is inside this run's directory;
    %n is the node's name, so the two slurmd of one machine keep apart."""
    ctl, node0, node1 = (cluster.hosts[h] for h in HOSTS)
    return textwrap.dedent(
        f"""\
        ClusterName=lab
        SlurmctldHost=ctl({ctl})
        SlurmUser=root
        SlurmdUser=root
        AuthType=auth/munge
        CredType=cred/munge
        AuthInfo=socket={munge}/munge.socket
        # no cgroups: processes are tracked through /proc, tasks are not confined
        ProctrackType=proctrack/linuxproc
        TaskPlugin=task/none
        # accounting off: no slurmdbd, so `scontrol show job` instead of `sacct`
        AccountingStorageType=accounting_storage/none
        JobAcctGatherType=jobacct_gather/none
        JobCompType=jobcomp/none
        SchedulerType=sched/builtin
        SelectType=select/cons_tres
        SelectTypeParameters=CR_CPU
        # the nodes' CPU counts are taken from here, not from the machine
        SlurmdParameters=config_overrides
        ReturnToService=2
        JobRequeue=1
        MpiDefault=none
        PlugStackConfig={tmp}/plugstack.conf
        MailProg=/bin/true
        # short timeouts: a lab, not a production cluster
        SlurmctldTimeout=10
        SlurmdTimeout=10
        MessageTimeout=5
        KillWait=2
        MinJobAge=600
        InactiveLimit=0
        StateSaveLocation={tmp}/state
        SlurmdSpoolDir={tmp}/spool/%n
        SlurmctldPidFile={tmp}/run/slurmctld.pid
        SlurmdPidFile={tmp}/run/slurmd-%n.pid
        SlurmctldLogFile={tmp}/log/slurmctld.log
        SlurmdLogFile={tmp}/log/slurmd-%n.log
        # GPUs are a generic resource (gres.conf says which files stand for them)
        GresTypes=gpu
        NodeName=node0 NodeAddr={node0} CPUs=6 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN
        NodeName=node1 NodeAddr={node1} CPUs=6 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN
        PartitionName=lab Nodes=node0,node1 Default=YES MaxTime=10 State=UP
        """
    )


def gres_conf(tmp):
    """Each node's GPUs, as Slurm counts and hands them out. On a GPU node the files are
    /dev/nvidia0 and on (or AutoDetect=nvml finds them); here they are placeholders, so
    Slurm sets CUDA_VISIBLE_DEVICES and SLURM_GPUS_ON_NODE as it does on GPU nodes, and
    CUDA, finding no GPU, leaves the trainer on the CPU. slurmd accepts only character or
    block devices: each placeholder is a twin of /dev/null (device 1, 3)."""
    lines = ["AutoDetect=off"]
    last = GPUS_PER_NODE - 1
    for node in ("node0", "node1"):
        folder = tmp / "gpus" / node
        folder.mkdir(parents=True)
        for index in range(GPUS_PER_NODE):
            os.mknod(folder / f"nvidia{index}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        lines.append(f"NodeName={node} Name=gpu File={folder}/nvidia[0-{last}]")
    return "\n".join(lines) + "\n"


def cgroup_version():
    """cgroup/v2 where /sys/fs/cgroup is the unified hierarchy, else cgroup/v1 (a
    container may mount v1 controllers on a tmpfs, which slurmd cannot autodetect)."""
    mounts = pathlib.Path("/proc/mounts").read_text().splitlines()
    unified = any(line.split()[1:3] == ["/sys/fs/cgroup", "cgroup2"] for line in mounts)
    return "cgroup/v2" if unified else "cgroup/v1"


class Slurm:
    """The running cluster: its namespaces, daemons, and the commands typed on `ctl`."""

    def __init__(self, cluster, tmp):
        self.cluster, self.tmp = cluster, tmp
        self.shared = tmp / "shared"
        self.conf = tmp / "slurm.conf"
        self.env = {
            "SLURM_CONF": str(self.conf),
            # this Python's folder first: the jobs' torchrun and python are this venv's
            "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}",
        }

    def start(self):
        for folder in ("state", "spool/node0", "spool/node1", "run", "log", "shared"):
            (self.tmp / folder).mkdir(parents=True)
        (self.tmp / "plugstack.conf").write_text("")
        # slurmd 22.05 starts a cgroup plugin even when no plugin in slurm.conf uses it;
        # it reads cgroup.conf beside slurm.conf to learn which cgroup version to expect.
        (self.tmp / "cgroup.conf").write_text(f"CgroupPlugin={cgroup_version()}\n")
        munge = make_munge_key(self.tmp)
        self.conf.write_text(slurm_conf(self.tmp, self.cluster, munge))
        (self.tmp / "gres.conf").write_text(gres_conf(self.tmp))
        self.daemon(
            "ctl",
            "munged",
            "--foreground",
            "--force",
            f"--socket={munge}/munge.socket",
            f"--key-file={munge}/munge.key",
            f"--log-file={munge}/munged.log",
            f"--pid-file={munge}/munged.pid",
            f"--seed-file={munge}/munged.seed",
        )
        wait_for(lambda: (munge / "munge.socket").exists(), "munged's socket")
        self.daemon("ctl", "slurmctld", "-D", "-i", "-f", str(self.conf))
        for node in ("node0", "node1"):
            self.daemon(node, "slurmd", "-D", "-N", node, "-f", str(self.conf))
        wait_for(self.nodes_idle, "both nodes idle in sinfo", seconds=30)

    def daemon(self, host, *argv):
        """A daemon in the foreground on `host`, its output in log/HOST-NAME.out. A compute
        node's /etc/hosts maps its own name to 127.0.1.1, as Debian's does: the jobs must
        not take a node's interface from what its own name resolves to there."""
        own = DEBIAN_OWN_ADDR if host.startswith("node") else None
        hosts_file = self.cluster.hosts_file(self.tmp, host, own_addr=own)
        with open(self.tmp / "log" / f"{host}-{argv[0]}.out", "w") as log:
            self.cluster.start(host, argv, self.env, hosts_file, log, self.tmp)

    def nodes_idle(self):
        states = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
        return sorted(states.split()) == ["idle", "idle", "node0", "node1"]

    def run(self, *argv, check=True, cwd=None):
        """A command typed on the login node (ctl)."""
        proc = subprocess.run(
            ["ip", "netns", "exec", self.cluster.ns["ctl"], *argv],
            capture_output=True,
            text=True,
            timeout=pace.limit(30),
            env={**job_environment(), **self.env},
            cwd=cwd or self.shared,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
        return proc.stdout

    def sbatch(self, script, options=(), args=()):
        """Submit a job script from the shared folder; returns the job id."""
        out = self.run("sbatch", "--parsable", *options, script.name, *args)
        return out.strip().split(";")[0]

    def sbatch_wrap(self, command, options=()):
        """Submit a one-line job (sbatch --wrap); returns the job id."""
        out = self.run("sbatch", "--parsable", *options, "--wrap", command)
        return out.strip().split(";")[0]

    def output(self, job_id):
        """A job's slurm-%j.out so far ("" until its node has created it)."""
        path = self.shared / f"slurm-{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def job(self, job_id):
        """`scontrol show job -o` as a dict."""
        line = self.run("scontrol", "show", "job", "-o", job_id)
        return dict(re.findall(r"([^\s=]+)=(\S*)", line))

    def log(self, name):
        return (self.tmp / "log" / name).read_text(errors="replace")


def job_environment():
    """What sbatch passes on to a job (--export=ALL): our environment, less a
    PYTHONUNBUFFERED we may have inherited (a build sets it), which would hide the
    buffering the lab shows. The job scripts set it themselves."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def wait_for(ready, what, seconds=10):
    deadline = time.monotonic() + pace.limit(seconds)
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what}")
        time.sleep(0.1)


class StateWatcher(threading.Thread):
    """Every change of every job's state, with the time it was seen and the number of the
    look that saw it (ten looks a second, so a state shorter than 0.1 s may pass unseen;
    changes that one look saw share its number, whatever order Slurm listed the jobs in)."""

    def __init__(self, slurm):
        super().__init__(daemon=True)
        self.slurm, self.changes, self.last, self.done = slurm, [], {}, False

    def run(self):
        look = 0
        while not self.done:
            look += 1
            out = self.slurm.run("scontrol", "show", "job", "-o", check=False)
            for line in out.splitlines():
                fields = dict(re.findall(r"([^\s=]+)=(\S*)", line))
                if "JobId" not in fields:
                    continue
                seen = (fields["JobState"], fields["Reason"], fields["Restarts"])
                if self.last.get(fields["JobId"]) != seen:
                    self.changes.append(
                        {
                            "t": time.time(),
                            "look": look,
                            "job": fields["JobId"],
                            "state": seen[0],
                            "reason": seen[1],
                            "restarts": int(seen[2]),
                        }
                    )
                    # after the change is written down: what the lab does on seeing a
                    # state then comes later in the timeline
                    self.last[fields["JobId"]] = seen
            time.sleep(0.1)

    def state(self, job_id):
        return self.last.get(job_id, ("UNKNOWN",))[0]

    def reason(self, job_id):
        return self.last.get(job_id, ("UNKNOWN", ""))[1]

    def note(self, job_id, what):
        """Something the lab did to a job, in the same timeline as its states."""
        self.changes.append({"t": time.time(), "job": job_id, "action": what})


# -------------------------------------------------------------------------------------
# Reading a job's output
# -------------------------------------------------------------------------------------
def events(out_text):
    """Every `@@` line the ranks printed into slurm-%j.out, in time order."""
    found = []
    for line in out_text.splitlines():
        at = line.find("@@ {")
        if at >= 0:
            found.append(json.loads(line[at + 3 :]))
    return sorted(found, key=lambda e: e["t"])


def ranks(evs):
    starts = [e for e in evs if e["event"] == "start"]
    keys = ("rank", "group_rank", "local_rank", "world", "device", "resume_step")
    return sorted(({k: e[k] for k in keys} for e in starts), key=lambda r: r["rank"])


# The line node-env.sh prints in each task: what Slurm gave it, and the interface chosen.
TASK_LINE = (
    r"^(?P<host>\S+) task (?P<task>\d+): interface (?P<interface>\S+), "
    r"SLURM_GPUS_ON_NODE=(?P<gpus_on_node>\S+) CUDA_VISIBLE_DEVICES=(?P<visible>\S+)$"
)


def tasks(out_text):
    """Each task's node-env.sh line, as a dict, in task order (a requeued job's: its
    last run's)."""
    found = {}
    for m in re.finditer(TASK_LINE, out_text, re.MULTILINE):
        found[int(m["task"])] = {**m.groupdict(), "task": int(m["task"])}
    return [found[task] for task in sorted(found)]


def shown_log(text, tmp, completed):
    """slurm-%j.out as a reader sees it, less the `@@` lines the lab reads, c10d's
    warnings that it cannot look up a peer's name (the namespaces have no DNS server), and,
    in a job that completed, a traceback printed as it ended (a torchrun agent may log one
    when the agent that held the rendezvous store has already gone)."""
    lines = text.splitlines()
    dns = [ln for ln in lines if "hostname of the client socket cannot be retrieved" in ln]
    kept = [ln for ln in lines if "@@ {" not in ln and ln not in dns]
    if completed:
        kept, dropped = without_tracebacks(kept)
        if dropped:
            kept.append(
                f"({dropped} lines left out: a traceback printed as the job ended; the job"
                " still completed)"
            )
    if dns:
        kept.append(f"({len(dns)} c10d warnings about reverse DNS left out)")
    return "\n".join(ln.replace(str(tmp), "$TMP") for ln in kept)


# A line that starts a traceback: Python's (a rank's has its `[rankN]:` prefix), or the
# frames of a C++ exception that torch logs as a warning. The header may follow another
# process's unfinished line, glued to it: two processes share the log, and a busy machine
# interleaves their writes.
TRACEBACK_HEADER = (
    r"^(\[rank\d+\]: ?)?.*?"
    r"(Traceback \(most recent call last\)|Exception raised from .*\(most recent call first\))"
)
# A line that ends an agent's traceback: a launcher's, a rank's or a logger's own line.
NOT_A_TRACEBACK = r"^(\[|job |srun|slurmstepd|[A-Z]+:|[WEI]\d{4} |\S+ task \d+: )"


def without_tracebacks(lines):
    """`lines` less each traceback (TRACEBACK_HEADER) and the log line that announced it;
    and how many lines that left out. A rank's traceback is the run of lines with its
    `[rankN]:` prefix; an agent's runs from its header to the next line that starts as a
    launcher's, a task's or a logger's line does ("[", "job ", "srun", "slurmstepd",
    "node0 task 0: ", "W1206 ...")."""
    kept, dropped, prefix = [], 0, None
    for line in lines:
        if prefix is not None:
            ended = not line.startswith(prefix) if prefix else re.match(NOT_A_TRACEBACK, line)
            prefix = None if ended else prefix
        header = re.match(TRACEBACK_HEADER, line)
        if prefix is None and header:
            prefix = header[1] or ""
            announced = kept and not prefix and re.match(r"^([A-Z]+:|\[?[WE]\d{4} )", kept[-1])
            if announced:
                kept.pop()  # the logger's line that carried an agent's traceback
                dropped += 1
        if prefix is None:
            kept.append(line)
        else:
            dropped += 1
    return kept, dropped


# -------------------------------------------------------------------------------------
# The run
# -------------------------------------------------------------------------------------
def requeue_failed(slurm, watcher, job_id):
    """What a user does when a job died of a failure it can resume from: put it back in
    the queue, from the login node. Slurm then holds it back (Reason=BeginTime) before
    it may start again; we read how long, then, as root, move its start time to now."""
    wait_for(lambda: watcher.state(job_id) in ENDED, "the crashing job to end", 120)
    failed = watcher.state(job_id)
    if failed != "FAILED":
        sys.exit(f"slurm.py: the job that should crash ended {failed}")
    slurm.run("scontrol", "requeue", job_id)
    watcher.note(job_id, f"scontrol requeue {job_id}")
    wait_for(
        lambda: watcher.last.get(job_id) == ("PENDING", "BeginTime", "1"),
        "the requeued job to pend",
        30,
    )
    info = slurm.job(job_id)
    requeued, eligible = (local_time(info[k]) for k in ("SubmitTime", "EligibleTime"))
    command = ["scontrol", "update", f"JobId={job_id}", "StartTime=now"]
    slurm.run(*command)
    watcher.note(job_id, " ".join(command))
    return {
        "reason": info["Reason"],
        "eligible_time": info["EligibleTime"],
        "hold_s": round(eligible - requeued),
        "command": " ".join(command),
    }


def local_time(stamp):
    """Slurm's YYYY-MM-DDTHH:MM:SS, in the machine's local time, as a Unix time."""
    return datetime.datetime.fromisoformat(stamp).timestamp()


# A job that prints a line, then works (sleeps) for a while: where does the line go?
PRINT_THEN_WORK = "import time; print(time.ctime()); time.sleep(10)"


def tasks_per_node(slurm):
    """srun starts its command once per task. With two tasks on each node, the torchrun
    script's srun line would start two torchrun agents per node, four for --nnodes=2."""
    command = ["srun", "--nodes=2", "--ntasks-per-node=2", "--label", "hostname"]
    return {"command": " ".join(command), "lines": sorted(slurm.run(*command).splitlines())}


def buffering_trap(slurm, watcher):
    """The same one-line job twice, once with PYTHONUNBUFFERED=1 passed by --export:
    what each slurm-%j.out holds while it runs, and after it ended."""
    wrap = f"python3 -c '{PRINT_THEN_WORK}'"
    options = {"plain": [], "unbuffered": ["--export=ALL,PYTHONUNBUFFERED=1"]}
    ids = {name: slurm.sbatch_wrap(wrap, opts) for name, opts in options.items()}
    wait_for(lambda: slurm.output(ids["unbuffered"]).strip(), "the unbuffered line", 30)
    time.sleep(1)  # the plain job, started with it, has printed by now too; both sleep on
    logs = {name: slurm.output(job_id) for name, job_id in ids.items()}
    wait_for_jobs(watcher, ids.values())
    return {
        name: {
            "id": job_id,
            "sbatch": " ".join(["sbatch", *options[name], "--wrap", f'"{wrap}"']),
            "while_running": logs[name],
            "after": slurm.output(job_id),
        }
        for name, job_id in ids.items()
    }


def wait_for_jobs(watcher, job_ids):
    while not all(watcher.state(job) in ENDED for job in job_ids):
        time.sleep(0.2)


def job_result(slurm, job_id, name):
    out = (slurm.shared / f"slurm-{job_id}.out").read_text(errors="replace")
    evs = events(out)
    info = slurm.job(job_id)
    completed = info["JobState"] == "COMPLETED"
    shown = ("JobId", "JobName", "JobState", "Reason", "Restarts", "ExitCode", "NodeList")
    shown += ("NumNodes", "NumTasks", "CPUs/Task", "TresPerNode", "TresPerTask", "StdOut")
    return {
        "id": job_id,
        "state": info["JobState"],
        "exit_code": info["ExitCode"],
        "restarts": int(info["Restarts"]),
        "show_job": {k: info[k].replace(str(slurm.tmp), "$TMP") for k in shown if k in info},
        "ranks": ranks(evs),
        "tasks": tasks(out),
        "params": final_params(evs, f"slurm.py: the {name} job") if completed else None,
        "log": shown_log(out, slurm.tmp, completed),
        "events": evs,
    }


def state_text(change):
    if "action" in change:
        return f"we run: {change['action']}"
    return f"{change['state']} ({change['reason']}), restarts={change['restarts']}"


def controller_lines(log, job_id):
    """(time, message) for slurmctld's log lines about starting, requeueing or ending
    `job_id`: a state that lasts less than the watcher's poll still leaves its line."""
    found = []
    for line in log.splitlines():
        m = re.match(r"^\[(\S+)\] (.*)$", line)
        about_job = m and re.search(rf"JobId={job_id}\b", m[2])
        if about_job and re.search(r"Allocate|Requeu|requeue|_job_complete: JobId=\d+ done", m[2]):
            found.append((local_time(m[1]), m[2]))
    return found


def requeue_figures(job, changes, log):
    """When rank 3 crashed, when the job went back, when it ran again and trained."""
    evs = job["events"]
    crash = next(e for e in evs if e["event"] == "crash")
    t0 = crash["t"]
    resumed_start = min(e["t"] for e in evs if e["event"] == "start" and e["resume_step"])
    resumed = next(e for e in evs if e["event"] == "step" and e["t"] > resumed_start)
    timeline = [(0.0, f"rank {crash['rank']} crashes at step {crash['step']}")]
    for change in changes:
        if change["job"] == job["id"]:
            timeline.append((change["t"] - t0, state_text(change)))
    for t, message in controller_lines(log, job["id"]):
        timeline.append((t - t0, f"slurmctld: {message}"))
    resume = sorted({e["resume_step"] for e in evs if e["event"] == "start"})
    timeline.append((resumed_start - t0, f"ranks start again, resume steps {resume}"))
    timeline.append((resumed["t"] - t0, f"step {resumed['step']} done"))
    return {
        "crash_step": crash["step"],
        "resume_steps": resume,
        "timeline": [{"t_s": round(t, 2), "what": w} for t, w in sorted(timeline)],
        "crash_to_resumed_s": round(resumed["t"] - t0, 2),
    }


def run(args, tmp, run_prefix):
    cluster = Cluster(run_prefix, "lab", list(HOSTS), SUBNET)
    cluster.create()
    progress(f"namespaces up: {', '.join(cluster.ns.values())}")
    slurm = Slurm(cluster, tmp)
    slurm.start()
    sinfo = slurm.run("sinfo", "-N", "-o", "%N %P %T %c %G")
    progress("slurmctld and both slurmd up, nodes idle")
    ntasks = tasks_per_node(slurm)
    for path in (TRAIN, NODE_ENV, *SCRIPTS.values()):
        shutil.copy(path, slurm.shared)
    reference = Reference(args.steps)  # trained beside the jobs, while we wait for them
    reference.start()
    watcher = StateWatcher(slurm)
    watcher.start()
    steps = f"--steps={args.steps}"
    crash = [steps, f"--crash-at-step={args.crash_at_step}", "--crash-rank=3"]
    # The torchrun job is submitted held, so that the job which depends on it is seen
    # waiting for it on any machine: Slurm may first list a new job as waiting for
    # Resources, and only names the Dependency when its scheduler next looks at the job.
    submitted = {"torchrun": (["--hold"], [steps]), "srun": ([], [steps])}
    ids = {}
    for name, (options, script_args) in submitted.items():
        ids[name] = slurm.sbatch(SCRIPTS[name], options, script_args)
    # The first two hold every GPU: the third waits for the first to end, however it ends.
    submitted["requeue"] = ([f"--dependency=afterany:{ids['torchrun']}"], crash)
    ids["requeue"] = slurm.sbatch(SCRIPTS["torchrun"], *submitted["requeue"])
    progress(f"submitted {ids}")
    wait_for(
        lambda: watcher.reason(ids["requeue"]) == "Dependency",
        "the requeue job to wait for its dependency",
        60,
    )
    release = ["scontrol", "release", ids["torchrun"]]
    slurm.run(*release)
    watcher.note(ids["torchrun"], " ".join(release))
    for name in ("srun", "torchrun"):
        wait_for(lambda n=name: watcher.state(ids[n]) == "RUNNING", f"the {name} job to run", 60)
    squeue = slurm.run("squeue")
    buffering = buffering_trap(slurm, watcher)
    hold = requeue_failed(slurm, watcher, ids["requeue"])
    progress(f"job {ids['requeue']} requeued; its {hold['hold_s']:g} s hold cut short")
    wait_for(lambda: watcher.state(ids["requeue"]) == "RUNNING", "the job to run again", 60)
    wait_for_jobs(watcher, ids.values())
    watcher.done = True
    watcher.join()
    progress("every job ended")
    jobs = {name: job_result(slurm, job_id, name) for name, job_id in ids.items()}
    for name, job in jobs.items():
        script = SCRIPTS["torchrun" if name == "requeue" else name].name
        options, script_args = submitted[name]
        job["sbatch"] = " ".join(["sbatch", *options, script, *script_args])
        if job["state"] != "COMPLETED":
            print(job["log"][-3000:], file=sys.stderr)
            for _, line in controller_lines(slurm.log("slurmctld.log"), job["id"]):
                print(f"slurmctld: {line}", file=sys.stderr)
            sys.exit(f"slurm.py: the {name} job ended {job['state']}")
    reference_params = reference.wait()
    log = slurm.log("slurmctld.log")
    requeue = {**requeue_figures(jobs["requeue"], watcher.changes, log), "hold": hold}
    for job in jobs.values():
        del job["events"]
    t_first = watcher.changes[0]["t"]
    from provenance import machine_facts

    diffs = [max_abs_diff(jobs[n]["params"], reference_params) for n in ("torchrun", "srun")]
    return {
        "lab": "slurm",
        "cluster": {"hosts": cluster.hosts, "namespaces": list(cluster.ns.values())},
        "slurm_conf": slurm.conf.read_text().replace(str(tmp), "$TMP"),
        "sinfo": sinfo,
        "ntasks": ntasks,
        "release": " ".join(release),
        "squeue": squeue,
        "buffering": buffering,
        "steps": args.steps,
        "jobs": jobs,
        "states": [{**c, "t_s": round(c["t"] - t_first, 2)} for c in watcher.changes],
        "requeue": requeue,
        "reference_max_abs_diff": max(diffs),
        "requeue_bit_identical": jobs["requeue"]["params"] == jobs["torchrun"]["params"],
        "crash_to_resumed_s": requeue["crash_to_resumed_s"],
        "import_torch_s": pace.import_seconds(),
        "env": machine_facts(),
    }


def command_lines(command):
    """`ctl$ COMMAND`, broken with backslashes to fit a page's 88 columns."""
    return continued_lines(["ctl$", *command.split()], 84)


def show_job(job):
    """The fields of `scontrol show job` a reader checks first, a few to a line."""
    fields = [f"{k}={v}" for k, v in job["show_job"].items()]
    for start in range(0, len(fields), 4):
        print("  " + " ".join(fields[start : start + 4]))


def ranks_table(job):
    print("rank  GROUP_RANK  LOCAL_RANK  WORLD_SIZE  device  resumed from step")
    for row in job["ranks"]:
        print(
            f"{row['rank']:>4}  {row['group_rank']:>10}  {row['local_rank']:>10}  "
            f"{row['world']:>10}  {row['device']:>6}  {row['resume_step']:>17}"
        )


def report(r):
    """The short human report; the page embeds each `== part ==` block where it fits."""
    jobs = r["jobs"]
    print("== cluster ==")
    print("ctl$ sinfo -N -o '%N %P %T %c %G'")
    print(textwrap.indent(r["sinfo"].rstrip(), "  "))
    print("== ntasks ==")
    print(command_lines(r["ntasks"]["command"]))
    print(textwrap.indent("\n".join(r["ntasks"]["lines"]), "  "))
    for name in ("torchrun", "srun"):
        job = jobs[name]
        print(f"== {name} ==")
        print(command_lines(job["sbatch"]))
        print(f"  Submitted batch job {job['id']}")
    print("== squeue ==")
    print(f"ctl$ {r['release']}   # once job {jobs['requeue']['id']} is seen waiting for it")
    print("ctl$ squeue   # while the first two jobs run")
    print(textwrap.indent(r["squeue"].rstrip(), "  "))
    for name in ("torchrun", "srun"):
        job = jobs[name]
        print(f"== {name}-result ==")
        print(f"ctl$ scontrol show job {job['id']}   # after it ended")
        show_job(job)
        ranks_table(job)
        print(f"ctl$ cat slurm-{job['id']}.out   # without the trainer's @@ lines")
        for line in job["log"].splitlines():
            say(line, indent="  ")
    say(
        f"after {r['steps']} steps, max |DDP - one-process reference| over both jobs "
        f"= {r['reference_max_abs_diff']:.1e}"
    )
    job, requeue = jobs["requeue"], r["requeue"]
    print("== buffering ==")
    for trap in r["buffering"].values():
        print(command_lines(trap["sbatch"]))
        print(f"  Submitted batch job {trap['id']}")
    print("once the second one's line is there, while both still run:")
    for trap in r["buffering"].values():
        print(f"ctl$ cat slurm-{trap['id']}.out")
        print(textwrap.indent(trap["while_running"] or "(empty)\n", "  "), end="")
    print("after they ended:")
    for trap in r["buffering"].values():
        print(f"ctl$ cat slurm-{trap['id']}.out")
        print(textwrap.indent(trap["after"] or "(empty)\n", "  "), end="")
    print("== requeue ==")
    print(command_lines(job["sbatch"]))
    print(f"  Submitted batch job {job['id']}")
    for row in requeue["timeline"]:
        say(f"{row['t_s']:+7.2f} s  {row['what']}", indent="  ")
    hold = requeue["hold"]
    say(
        f"Slurm would have held the requeued job {hold['hold_s']} s (Reason={hold['reason']}, "
        f"EligibleTime={hold['eligible_time']}); `{hold['command']}` let it start at once."
    )
    say(f"from the crash to the first step after the resume: {r['crash_to_resumed_s']} s")
    print(f"ctl$ grep -v '^ *\\[rank' slurm-{job['id']}.out   # its launcher lines")
    for line in job["log"].splitlines():
        if re.match(r"^(job |srun|slurmstepd)", line):
            say(line, indent="  ")
    print(f"ctl$ scontrol show job {job['id']}")
    show_job(job)
    same = "yes" if r["requeue_bit_identical"] else "NO"
    say(f"final parameters bit-identical to the uninterrupted torchrun job: {same}")


def main():
    args = parse_args()
    try:
        result = run_guarded(PREFIX, args.deadline, lambda tmp, rp: run(args, tmp, rp))
    except Stopped as why:
        sys.exit(f"slurm.py: {why}; tore down the cluster, its daemons and jobs")
    report(result)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
