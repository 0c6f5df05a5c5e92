"""Hosts on one Linux machine: network namespaces on a private link, and one teardown.

The two-node lab (two_nodes.py) and the Slurm lab (slurm.py) build their "nodes"
here. Each host is a network namespace with one interface, eth0, plugged into a bridge
that lives in a namespace of its own (the switch). Addresses come from 198.18.0.0/15, a
range reserved for network tests, and exist only inside the namespaces: both ends of
every veth pair are born there, so the machine's own interfaces never change.

Teardown lives in one place, a small shell process started first in a session of its
own (the guardian). It waits for the lab to end (its stdin closes however the lab ends,
SIGKILL included), then kills every process in the run's namespaces, deletes them, and
removes the run's temporary directory; the lab, which has adopted its descendants'
orphans, then collects them, so that nothing of the run is left when it returns. A run
whose guardian was killed too is swept by the next run of the same lab. Both labs report
where they are with progress().
"""

import contextlib
import ctypes
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pace

PR_SET_CHILD_SUBREAPER = 36  # prctl option, from <linux/prctl.h>
STARTED = time.monotonic()  # when the lab started: it imports this module at its top


def progress(message):
    """Where the run is, on stderr: a build that fails shows these last lines."""
    print(f"[+{time.monotonic() - STARTED:5.1f} s] {message}", file=sys.stderr, flush=True)


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=10)


# The one teardown. $1: the run's prefix, $2: its temp dir, $3: how many seconds it may
# take. It first waits for EOF. A daemon may fork while it is being killed (slurmd
# starting a job step), and a killed process stays in its namespace until it has freed
# its memory, which takes longer on a busy machine: so each namespace is emptied until
# no process is left in it, then deleted. A process that outlives the limit is named.
TEARDOWN = r"""
cat >/dev/null
end=$(( $(date +%s) + $3 ))
for ns in $(ip netns list | cut -d' ' -f1 | grep "^$1-"); do
  while pids=$(ip netns pids "$ns") && [ -n "$pids" ]; do
    if [ "$(date +%s)" -ge "$end" ]; then
      echo "teardown: still in $ns after $3 s:" $pids >&2
      break
    fi
    echo "$pids" | xargs -r kill -9 2>/dev/null
    sleep 0.05
  done
  ip netns del "$ns"
done
rm -rf "$2"
"""
# Where Debian's /etc/hosts puts a machine's own name: a host given it (hosts_file's own_addr)
# resolves its own name to a loopback address, as many real machines do.
DEBIAN_OWN_ADDR = "127.0.1.1"
TEARDOWN_S = 10  # seconds, at pace's reference: killed daemons and ranks take well under 1


def teardown_command(run_prefix, tmp):
    limit = round(pace.limit(TEARDOWN_S))
    return ["sh", "-c", TEARDOWN, "teardown", run_prefix, str(tmp), str(limit)]


def start_guardian(run_prefix, tmp):
    return subprocess.Popen(
        teardown_command(run_prefix, tmp),
        stdin=subprocess.PIPE,
        start_new_session=True,  # outside our process group: a killpg of us spares it
    )


def adopt_orphans():
    """Make this process the one that inherits its descendants' orphans (a child subreaper),
    instead of the machine's init: a job step whose slurmd was killed comes to us, so we can
    collect it before we return."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)


def collect_children(seconds):
    """End and collect every child of ours (daemons we started, orphans we adopted): a killed
    process stays listed, by its name, until its parent collects it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pid in children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # none left
        if pid == 0:
            time.sleep(0.01)  # a child still dying


def children():
    """The pids of this process's children, from /proc/PID/stat (field 4: the parent)."""
    found = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue  # it ended while we looked
        if parent == os.getpid():
            found.append(int(stat.parent.name))
    return found


def sweep_leftovers(prefix):
    """Tear down what dead runs of a lab left behind (a run whose guardian was killed
    too). Every namespace and temp dir of a run is named PREFIX-PID-...; a run is dead
    when its PID is."""
    stale = set()
    for line in sh("ip", "netns", "list").stdout.splitlines():
        found = re.match(rf"({prefix}-(\d+))-", line)
        if found and not pathlib.Path(f"/proc/{found[2]}").exists():
            stale.add(found[1])
    for path in pathlib.Path(tempfile.gettempdir()).glob(f"{prefix}-*"):
        found = re.match(rf"({prefix}-(\d+))-", path.name)
        if found and not pathlib.Path(f"/proc/{found[2]}").exists():
            shutil.rmtree(path, ignore_errors=True)
    for run_prefix in sorted(stale):
        subprocess.run(teardown_command(run_prefix, ""), stdin=subprocess.DEVNULL)


class Stopped(Exception):
    """SIGTERM, SIGINT or the deadline: unwind, so that the guardian tears down."""


def _on_signal(signum, frame):
    raise Stopped(signal.Signals(signum).name)


def run_guarded(prefix, deadline, run):
    """Call run(tmp, run_prefix) with a guardian standing by and a deadline in seconds.

    Dead runs' leftovers are swept first. However run ends, the guardian then kills every
    process in the run's namespaces and removes `tmp`. A signal or the deadline raises
    Stopped, saying which ("stopped after N s" for the deadline).
    """
    sweep_leftovers(prefix)
    adopt_orphans()
    run_prefix = f"{prefix}-{os.getpid()}"
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"{run_prefix}-"))
    guardian = start_guardian(run_prefix, tmp)
    # Whatever the run starts keeps its temporary files in `tmp` too, which goes with it:
    # torchrun, for one, makes a torchelastic_* log folder in TMPDIR for every agent.
    os.environ["TMPDIR"] = tempfile.tempdir = str(tmp)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
        signal.signal(signum, _on_signal)
    signal.setitimer(signal.ITIMER_REAL, deadline)
    try:
        return run(tmp, run_prefix)
    except Stopped as why:
        late = why.args[0] == "SIGALRM"
        raise Stopped(f"stopped after {deadline:g} s" if late else why.args[0]) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # let the teardown finish
        guardian.stdin.close()  # the guardian tears down now
        guardian.wait(timeout=pace.limit(2 * TEARDOWN_S))
        collect_children(pace.limit(TEARDOWN_S))  # nothing of the run is left when we return


class Cluster:
    """Hosts on one private link: a switch namespace with a bridge, one per host.

    `subnet` is the first three numbers of a /24 in 198.18.0.0/15; the hosts get .1, .2,
    ... in the order given.
    """

    def __init__(self, run_prefix, name, hosts, subnet):
        self.name, self.subnet = name, subnet
        self.hosts = {host: f"{subnet}.{i + 1}" for i, host in enumerate(hosts)}
        self.ns = {host: f"{run_prefix}-{name}-{host}" for host in [*hosts, "switch"]}

    def create(self):
        switch = self.ns["switch"]
        sh("ip", "netns", "add", switch)
        sh("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", switch, "link", "set", "br0", "up")
        for host, addr in self.hosts.items():
            ns = self.ns[host]
            sh("ip", "netns", "add", ns)
            # Both ends are born inside namespaces: the machine's own never sees them.
            sh(
                "ip",
                "-n",
                ns,
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                host,
                "netns",
                switch,
            )
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", switch, "link", "set", host, "master", "br0", "up")

    def hosts_file(self, tmp, host, own_addr=None):
        """/etc/hosts for `host`: every host by name; its own at `own_addr` if given."""
        lines = ["127.0.0.1 localhost"]
        for other, addr in self.hosts.items():
            lines.append(f"{own_addr if (other == host and own_addr) else addr} {other}")
        path = tmp / f"hosts-{self.name}-{host}"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self, host, argv, env, hosts_file, log, cwd, stdin=subprocess.DEVNULL):
        """Run argv on `host`: its network namespace, hostname and /etc/hosts."""
        inside = 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
        command = [
            *("ip", "netns", "exec", self.ns[host]),
            *("unshare", "--uts", "--mount", "sh", "-c", inside, "node"),
            *(host, str(hosts_file), *argv),
        ]
        return subprocess.Popen(
            command,
            env={**os.environ, **env},
            stdin=stdin,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
        )

    def run_in(self, host, *argv):
        return sh("ip", "netns", "exec", self.ns[host], *argv).stdout
