"""Two nodes for real: torchrun across two network namespaces, an elastic restart, the
interface trap and an open store. Needs root (CAP_NET_ADMIN), iproute2 and nft.

    sudo python code/clusters/two_nodes.py                  # all four parts
    sudo python code/clusters/two_nodes.py --nodes-up 1 --join-timeout 5  # node 1 never comes

Each "node" is a Linux network namespace with one interface, eth0, on a private link.
Its address comes from 198.18.0.0/15, a range reserved for tests, and exists only inside
the namespaces: no packet leaves them, and the machine's own interfaces stay untouched.
Every node runs what a real cluster node runs, one torchrun agent:

    GLOO_SOCKET_IFNAME=eth0 torchrun --nnodes=2 --nproc_per_node=2 \
        --rdzv_backend=c10d --rdzv_endpoint=node0:29400 --rdzv_id=JOB \
        code/clusters/elastic_train.py --ckpt-dir=$SHARED/ckpt

Three small clusters run side by side, one job each ($SHARED, a temporary directory,
plays the shared file system):

  train    four ranks on two nodes match the one-process reference. Before node 1
           joins, a third namespace (the outsider) reads and writes node 0's store; then
           a firewall rule that admits only the job's nodes shuts it out, and node 1
           joins through it.
  restart  rank 3 (node 1) crashes at a step; both agents restart their workers
           (--max_restarts=1), the script resumes from its checkpoint, and the final
           parameters must be bit-identical to those of the uninterrupted run.
  trap     node 1's hostname resolves to 127.0.1.1 (Debian's default /etc/hosts) and
           the job runs without GLOO_SOCKET_IFNAME: gloo advertises the loopback address
           and the connection fails. The other jobs have the same /etc/hosts and set it.

Teardown lives in one place (netns.py, shared with the Slurm lab), a small shell
process started first in a session of its own. It waits for this script to end (its
stdin closes however the script ends, SIGKILL included), then kills every process in
the run's namespaces, deletes them, and removes the temporary directory. Namespaces of
a run whose guardian was killed too are swept at the next start. What else it shares
with the Slurm lab (the machine check, the reference run beside the jobs, the report's
wrapping) is in cluster_common.py.

--json PATH writes: clusters (hosts, namespaces), steps, parts {train, restart, trap,
store}, reference_max_abs_diff, restart_bit_identical, env.
"""

import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import time
import uuid

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
OUTSIDER = HERE / "store_outsider.py"
PREFIX = "ddp2n"  # every namespace and temp dir of a run is named ddp2n-PID-...
RDZV_PORT = 29400  # private to each cluster's namespaces: parallel runs cannot collide
SUBNETS = {"train": "198.18.1", "restart": "198.18.2", "trap": "198.18.3"}
SHOWN_ENV = ("GLOO_SOCKET_IFNAME", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE")
PARTS = ("train", "restart", "trap", "store")


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
        help="step at which rank 3 crashes (restart job)",
    )
    # Both defaults are written for a machine where `import torch` takes 2 s, and stretched
    # for a slower one (pace.py); a run takes about a minute on such a machine.
    parser.add_argument(
        "--join-timeout",
        type=float,
        help="seconds torchrun's rendezvous waits for every node before giving up "
        "(default 90, at this machine's pace: node 1 starts late, after the outsider's visit)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        help="seconds before the whole run is stopped (default 150, at this machine's pace)",
    )
    parser.add_argument(
        "--nodes-up",
        type=int,
        choices=(1, 2),
        default=2,
        help="1: start node 0 of the train job only, to watch a rendezvous time out",
    )
    parser.add_argument("--json", metavar="PATH", help="write every result to PATH")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps must be at least 2, got {args.steps}")
    if not 2 <= args.crash_at_step <= args.steps:
        parser.error(f"--crash-at-step must be between 2 and --steps ({args.steps})")
    for option in ("join_timeout", "deadline"):
        if getattr(args, option) is not None and not getattr(args, option) > 0:
            flag = "--" + option.replace("_", "-")
            parser.error(f"{flag} must be a positive number of seconds")
    folder = os.path.dirname(os.path.abspath(args.json or "."))
    if args.json and not os.path.isdir(folder):
        parser.error(f"--json {args.json}: directory {folder!r} does not exist")
    require_root_and_tools(
        parser,
        not_root="two_nodes.py: needs root (CAP_NET_ADMIN) for network namespaces",
        tools=("ip", "nft", "unshare", "hostname"),
        hint="Debian: apt-get install iproute2 nftables",
    )
    if args.join_timeout is None:
        args.join_timeout = round(pace.limit(90))  # torchrun reads whole seconds
    if args.deadline is None:
        args.deadline = pace.limit(150)
    return args


# -------------------------------------------------------------------------------------
# Helpers: one torchrun job
# -------------------------------------------------------------------------------------
def torchrun_argv(job_id, args, max_restarts, ckpt_dir, extra, nproc):
    torchrun = pathlib.Path(sys.executable).with_name("torchrun")
    return [
        str(torchrun) if torchrun.exists() else "torchrun",
        "--nnodes=2",
        f"--nproc_per_node={nproc}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=node0:{RDZV_PORT}",
        f"--rdzv_id={job_id}",
        f"--rdzv_conf=join_timeout={args.join_timeout:g}",
        f"--max_restarts={max_restarts}",
        str(TRAIN.relative_to(HERE.parent)),
        f"--ckpt-dir={ckpt_dir}",
        f"--steps={args.steps}",
        *extra,
    ]


def shown(argv, env, tmp):
    """The command as a reader types it on a node: torchrun by name, $SHARED for the
    run's temporary directory (the shared file system), wrapped to fit a page."""
    words = [f"{k}={v}" for k, v in env.items() if k in SHOWN_ENV]
    words += ["torchrun", *(word.replace(str(tmp), "$SHARED") for word in argv[1:])]
    return continued_lines(words, 76)


class Job:
    """Two torchrun agents, one per node; what each prints is kept in a log file."""

    def __init__(
        self,
        cluster,
        tmp,
        args,
        max_restarts=0,
        extra=(),
        ifname=True,
        env=None,
        nproc=2,
    ):
        self.cluster, self.tmp = cluster, tmp
        self.id = f"{cluster.name}-{uuid.uuid4().hex[:8]}"  # a fresh job id every run
        self.ckpt = tmp / f"ckpt-{cluster.name}"
        self.ckpt.mkdir()
        extra = list(extra)
        self.argv = torchrun_argv(self.id, args, max_restarts, self.ckpt, extra, nproc)
        # INFO shows the agents' restart decisions; OMP_NUM_THREADS=1 is torchrun's
        # default anyway, and setting it spares every log torchrun's banner about it.
        self.env = {
            "LOGLEVEL": "INFO",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        if ifname:
            self.env["GLOO_SOCKET_IFNAME"] = "eth0"
        self.env.update(env or {})
        self.agents, self.logs = {}, {}

    def start(self, host):
        log_path = self.tmp / f"{self.cluster.name}-{host}.log"
        self.logs[host] = log_path
        # node 1 maps its own name to loopback in every job, as Debian's /etc/hosts does
        own = DEBIAN_OWN_ADDR if host == "node1" else None
        hosts_file = self.cluster.hosts_file(self.tmp, host, own_addr=own)
        with open(log_path, "w") as log:
            agent = self.cluster.start(host, self.argv, self.env, hosts_file, log, HERE.parent)
        self.agents[host] = agent

    def wait(self, grace_s=10):
        """Exit status per node. Once one agent has failed, the others get `grace_s`
        (at pace's reference) to notice before they are stopped (SIGTERM: torchrun then
        stops its workers)."""
        grace_s, failed_at = pace.limit(grace_s), None
        while any(agent.poll() is None for agent in self.agents.values()):
            codes = [agent.returncode for agent in self.agents.values()]
            if failed_at is None and any(code not in (None, 0) for code in codes):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > grace_s:
                for agent in self.agents.values():
                    if agent.poll() is None:
                        agent.terminate()
            time.sleep(0.2)
        return {host: agent.returncode for host, agent in self.agents.items()}

    def output(self, host):
        return self.logs[host].read_text(errors="replace")

    def events(self):
        """Every `@@` line the workers printed, from both nodes, in time order."""
        found = []
        for host in self.logs:
            for line in self.output(host).splitlines():
                if line.startswith("@@ "):
                    found.append({**json.loads(line[3:]), "node": host})
        return sorted(found, key=lambda e: e["t"])

    def agent_lines(self, pattern):
        """(time, node, message) for agent log lines matching `pattern`."""
        stamp = re.compile(r"^[IWE]\d{4} (\d\d):(\d\d):(\d\d\.\d+) .*?\] (.*)$")
        found = []
        for host in self.logs:
            for line in self.output(host).splitlines():
                m = stamp.match(line)
                if m and re.search(pattern, m[4]):
                    found.append((wall_clock_today(m), host, m[4]))
        return sorted(found)


def wall_clock_today(m):
    """glog's HH:MM:SS.us as a Unix time (the agents log local time, as we do)."""
    today = datetime.datetime.now().replace(hour=0, minute=0, second=0, microsecond=0)
    return today.timestamp() + int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3])


def first_error(text):
    """The message of the last exception a worker raised, without its traceback."""
    lines = [ln.strip() for ln in text.splitlines()]
    errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception)(: |$)", ln)]
    return errors[-1] if errors else "no error message found"


def loopback_error(text):
    """Gloo's own words about the address it could not reach, source path trimmed."""
    for line in text.splitlines():
        gloo = line.startswith("RuntimeError: Gloo connectFullMesh")
        if gloo and DEBIAN_OWN_ADDR in line:
            return re.sub(r"\[/\S+\] ", "", line.strip())
    return first_error(text)


def require_success(job, codes):
    """A job that should have trained and did not: its node's last lines, one line."""
    for host, code in codes.items():
        if code != 0:
            print(job.output(host)[-3000:], file=sys.stderr)
            error = first_error(job.output(host))
            name = job.cluster.name
            sys.exit(f"two_nodes.py: the {name} job failed on {host}: {error}")


def next_report(proc):
    """The next `@@` line a process prints (its warnings and C++ frames are dropped)."""
    noise = []
    for line in proc.stdout:
        if line.startswith("@@ "):
            return json.loads(line[3:])
        noise.append(line.rstrip())
    return {"connected": False, "error": f"exited without a report: {noise[-1:]}"}


# -------------------------------------------------------------------------------------
# The parts
# -------------------------------------------------------------------------------------
def open_store_then_train(job, args):
    """Node 0 waits for node 1; meanwhile the outsider visits, then is shut out."""
    node0_addr = job.cluster.hosts["node0"]
    outsider_hosts = job.cluster.hosts_file(job.tmp, "outsider")
    wait_s = str(round(pace.limit(20)))
    outsider = job.cluster.start(
        "outsider",
        # it may wait for node 0's agent, which imports torch first: paced like our limits
        [sys.executable, str(OUTSIDER), node0_addr, str(RDZV_PORT), job.id, wait_s],
        {"PYTHONUNBUFFERED": "1"},
        outsider_hosts,
        subprocess.PIPE,
        HERE.parent,
        stdin=subprocess.PIPE,
    )
    job.start("node0")  # the outsider retries until node 0's agent is listening
    visit = next_report(outsider)
    progress(f"outsider visited node0's store: {visit.get('connected')}")
    listening = [
        line.split()[3]
        for line in job.cluster.run_in("node0", "ss", "-ltnH").splitlines()
        if line.split()[3].endswith(f":{RDZV_PORT}")
    ]
    # The fix the page recommends: only the job's own nodes may reach the store's port.
    nodes = [addr for host, addr in job.cluster.hosts.items() if host != "outsider"]
    rule = f"tcp dport {RDZV_PORT} ip saddr != {{ {', '.join(nodes)} }} drop"
    job.cluster.run_in("node0", "nft", "add", "table", "inet", "guard")
    job.cluster.run_in(
        "node0",
        "nft",
        "add chain inet guard input { type filter hook input priority 0 ; }",
    )
    job.cluster.run_in("node0", "nft", f"add rule inet guard input {rule}")
    outsider.stdin.write("firewall up\n")
    outsider.stdin.flush()
    blocked = next_report(outsider)
    progress(f"outsider after the rule: connected={blocked.get('connected')}")
    outsider.stdin.close()  # it exits on its own; the teardown ends it if it has not
    if args.nodes_up == 2:
        job.start("node1")
    codes = job.wait()
    progress(f"train job ended: {codes}")
    return {
        "listening": listening,
        "visit": visit,
        "rule": f"nft add rule inet guard input {rule}",
        "after_rule": blocked,
        "exit_codes": codes,
    }


def train_part(job):
    events = job.events()
    starts = [e for e in events if e["event"] == "start"]
    return {
        "command": shown(job.argv, job.env, job.tmp),
        "exit_codes": {host: agent.returncode for host, agent in job.agents.items()},
        "ranks": sorted(
            (
                {k: e[k] for k in ("rank", "node", "group_rank", "local_rank", "world")}
                for e in starts
            ),
            key=lambda r: r["rank"],
        ),
        "params": final_params(events, "two_nodes.py"),
    }


def restart_part(job, codes):
    events = job.events()
    crash = next(e for e in events if e["event"] == "crash")
    t0 = crash["t"]
    after = [e for e in events if e["t"] > t0]
    restarted = [e for e in after if e["event"] == "start"]
    back = min(e["t"] for e in restarted)
    resumed = next(e for e in after if e["event"] == "step" and e["t"] > back)
    timeline = [
        (
            0.0,
            crash["node"],
            f"rank {crash['rank']} crashes at step {crash['step']}",
        )
    ]
    for t, node, message in job.agent_lines(r"will restart worker group"):
        what = "agent: " + message.removeprefix("[default] ")
        timeline.append((t - t0, node, what))
    for node in ("node0", "node1"):
        mine = [e for e in restarted if e["node"] == node]
        first = min(mine, key=lambda e: e["t"])
        timeline.append(
            (
                first["t"] - t0,
                node,
                f"workers start again: TORCHELASTIC_RESTART_COUNT={first['restart']}, "
                f"resume from step {first['resume_step']}",
            )
        )
    done = f"step {resumed['step']} done"
    timeline.append((resumed["t"] - t0, resumed["node"], done))
    return {
        "command": shown(job.argv, job.env, job.tmp),
        "exit_codes": codes,
        "crash_step": crash["step"],
        "resume_steps": sorted({e["resume_step"] for e in restarted}),
        "restart_count_by_node": {e["node"]: e["restart"] for e in restarted},
        "restarted_ranks": sorted(e["rank"] for e in restarted),
        "timeline": [timeline_row(*row) for row in sorted(timeline)],
        "crash_to_resumed_s": round(resumed["t"] - t0, 2),
        "params": final_params(events, "two_nodes.py"),
    }


def timeline_row(t, node, what):
    return {"t_s": round(t, 2), "node": node, "what": what}


def trap_part(job, codes):
    return {
        "command_node1": shown(job.argv, job.env, job.tmp),
        "hosts_node1": (job.tmp / "hosts-trap-node1").read_text(),
        "exit_codes": codes,
        "failed": any(code != 0 for code in codes.values()),
        "error": loopback_error(job.output("node0") + job.output("node1")),
    }


# -------------------------------------------------------------------------------------
# The run
# -------------------------------------------------------------------------------------
def run(args, tmp, run_prefix):
    clusters = {
        name: Cluster(run_prefix, name, hosts, SUBNETS[name])
        for name, hosts in (
            ("train", ["node0", "node1", "outsider"]),
            ("restart", ["node0", "node1"]),
            ("trap", ["node0", "node1"]),
        )
    }
    if args.nodes_up == 1:
        clusters = {"train": clusters["train"]}
    for cluster in clusters.values():
        cluster.create()
    names = [ns for cluster in clusters.values() for ns in cluster.ns.values()]
    progress(f"namespaces up: {', '.join(names)}")
    reference = Reference(args.steps)  # trained beside the jobs, while we wait for them
    reference.start()
    train = Job(clusters["train"], tmp, args)
    if args.nodes_up == 1:
        open_store_then_train(train, args)
        error = first_error(train.output("node0"))
        sys.exit(f"two_nodes.py: node 1 never joined; rendezvous gave up: {error}")
    # The restarted workers must not share the first round's store: its keys would hand
    # them the dead workers' addresses (pytorch/pytorch#135712).
    restart = Job(
        clusters["restart"],
        tmp,
        args,
        max_restarts=1,
        extra=[f"--crash-at-step={args.crash_at_step}"],
        env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
    )
    # One worker per node is enough to show the trap, and it saves two torch imports.
    short = ["--timeout=5"]  # gloo gives up connecting after this many seconds
    trap = Job(clusters["trap"], tmp, args, extra=short, ifname=False, nproc=1)
    for job in (restart, trap):
        job.start("node0")
        job.start("node1")
    store = open_store_then_train(train, args)
    require_success(train, store["exit_codes"])
    trap_codes = trap.wait()
    progress(f"trap job ended: {trap_codes}")
    restart_codes = restart.wait()
    progress(f"restart job ended: {restart_codes}")
    require_success(restart, restart_codes)

    from provenance import machine_facts

    reference_params = reference.wait()
    parts = {
        "train": train_part(train),
        "restart": restart_part(restart, restart_codes),
        "trap": trap_part(trap, trap_codes),
        "store": store,
    }
    reference_diff = max_abs_diff(parts["train"]["params"], reference_params)
    return {
        "lab": "two_nodes",
        "clusters": {
            name: {"hosts": c.hosts, "namespaces": list(c.ns.values())}
            for name, c in clusters.items()
        },
        "steps": args.steps,
        "parts": parts,
        "reference_max_abs_diff": reference_diff,
        "restart_bit_identical": parts["restart"]["params"] == parts["train"]["params"],
        "env": machine_facts(),
    }


def report(r):
    """The short human report; the page embeds each `== part ==` block where it fits."""
    train, restart, trap, store = (r["parts"][k] for k in PARTS)
    hosts = r["clusters"]["train"]["hosts"]
    print("== train ==")
    say(f"node0 ({hosts['node0']}) and node1 ({hosts['node1']}) each run:")
    print(textwrap.indent(train["command"], "  "))
    print("rank  node   GROUP_RANK  LOCAL_RANK  WORLD_SIZE")
    for row in train["ranks"]:
        print(
            f"{row['rank']:>4}  {row['node']:<5}  {row['group_rank']:>10}  "
            f"{row['local_rank']:>10}  {row['world']:>10}"
        )
    say(
        f"after {r['steps']} steps, max |DDP - one-process reference| = "
        f"{r['reference_max_abs_diff']:.1e}"
    )
    print("== restart ==")
    say(f"rank 3 is told to crash at step {restart['crash_step']}; each node runs:")
    print(textwrap.indent(restart["command"], "  "))
    for row in restart["timeline"]:
        say(f"+{row['t_s']:5.2f} s  {row['node']:<5}  {row['what']}", indent="  ")
    same = "yes" if r["restart_bit_identical"] else "NO"
    say(f"final parameters bit-identical to the uninterrupted run: {same}")
    print("== trap ==")
    print("node1's /etc/hosts:")
    print(textwrap.indent(trap["hosts_node1"], "  "), end="")
    print("node1 runs, without GLOO_SOCKET_IFNAME:")
    print(textwrap.indent(trap["command_node1"], "  "))
    outcome = "failed" if trap["failed"] else "did NOT fail"
    say(f"the job {outcome}: {trap['error']}")
    say("the train and restart jobs: the same hosts file, GLOO_SOCKET_IFNAME=eth0")
    print("== store ==")
    bound = ", ".join(store["listening"])
    say(f"node0$ ss -ltn: port {RDZV_PORT} listening on {bound}")
    visit = store["visit"]
    say(f"outsider ({hosts['outsider']}, not in the job), before node1 joins:")
    if visit.get("connected"):
        say(f"connected; keys: {', '.join(visit['keys'])}", indent="  ")
        kind = "pickle" if visit["rdzv_state_is_pickle"] else "data (not a pickle)"
        say(
            f"read the rendezvous state: {visit['rdzv_state_bytes']} bytes of {kind}",
            "  ",
        )
        say(
            f"wrote outsider/was-here, read it back: {visit['wrote_and_read_back']}",
            "  ",
        )
    else:
        say(f"could not connect: {visit.get('error')}", indent="  ")
    table, rule = store["rule"].split(" tcp ", 1)
    print(f"node0# {table} \\\n    tcp {rule}")
    after = store["after_rule"]
    refused = f"shut out: {after.get('error')}"
    outcome = "still connects" if after.get("connected") else refused
    say(f"outsider again: {outcome}")
    codes = ", ".join(f"{host} {code}" for host, code in store["exit_codes"].items())
    say(f"node1 then joins through the rule and the job trains (exit status: {codes})")


def main():
    args = parse_args()
    try:
        result = run_guarded(PREFIX, args.deadline, lambda tmp, rp: run(args, tmp, rp))
    except Stopped as why:
        sys.exit(f"two_nodes.py: {why}; tore down every namespace and process")
    report(result)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
