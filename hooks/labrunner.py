"""Run a lab script as a real process, key and cache its record: the logic behind hooks/labs.py.

This module needs no MkDocs, so that a GPU machine with nothing but torch (and PyYAML) can
record a run for the site: `python hooks/labrunner.py record NAME` runs the lab declared as NAME
in mkdocs.yml and writes its record to the run's `recorded:` file.

A record is a JSON object: name, command, key, started_utc, wall_s, git_commit, stdout, and
result (what the lab wrote with --json).
"""

import ast
import contextlib
import datetime
import fcntl
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import pathlib
import platform
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent  # the project, for the command line
TRACEBACK = "Traceback (most recent call last)"
# What torch itself keeps in TMPDIR, shared by every run and meant to persist: the per-user
# compile cache that `import torch._dynamo` makes. Anything else there is the run's own.
TORCH_OWN = ("torchinductor_",)
LOG = logging.getLogger("mkdocs.hooks.labs")
# The lab cache that `nox -s tests` hands both of its halves: the build and the tests beside it
# then run each lab once between them (load_record; site_tests/conftest.py's lab_cache).
SHARED_CACHE_ENV = "SHARED_LAB_CACHE"


# ---------------------------------------------------------------------------------------------
# Declared runs and their cache keys
# ---------------------------------------------------------------------------------------------
class LabRun:
    """One declared run: which script, with which arguments, how long it may take."""

    def __init__(self, name, spec, root):
        known = {
            *("script", "args", "timeout", "recorded", "live_if_root", "torchrun", "inputs"),
            *("plain", "shown_first"),
        }
        unknown = set(spec) - known
        if unknown or "script" not in spec:
            raise LabError(f"lab run {name!r}: needs `script`, got keys {sorted(spec)}")
        # torchrun: N starts the script as a reader would on one machine, with N processes;
        # such a script is plain training code and writes no --json of its own.
        self.torchrun = int(spec["torchrun"]) if "torchrun" in spec else None
        # plain: true starts such a script as `python SCRIPT ARGS`, as a reader would.
        self.plain_python = str(spec.get("plain", "false")).lower() == "true"
        self.plain = self.plain_python or self.torchrun is not None
        self.name = name
        self.root = root
        self.script = root / spec["script"]
        self.args = [str(arg) for arg in spec.get("args", [])]
        self.timeout = float(spec.get("timeout", 60))
        self.record_file = root / spec["recorded"] if "recorded" in spec else None
        # live_if_root: a run that needs root (network namespaces) runs live where the build
        # is root and embeds its committed record elsewhere.
        needs_root = str(spec.get("live_if_root", "false")).lower() == "true"
        self.recorded = None if needs_root and os.geteuid() == 0 else self.record_file
        # Any other recorded run needs what no build machine has: a GPU.
        self.needs_gpu = self.record_file is not None and not needs_root
        # inputs: globs of files the run reads without importing them (the exercises'
        # tests and solutions, which the grader hands to pytest); they join the cache key.
        self.inputs = [str(pattern) for pattern in spec.get("inputs", [])]
        if not self.script.is_file():
            raise LabError(f"lab run {name!r}: no script at {self.script}")

    @property
    def command(self):
        """The command a reader types (the build adds --json to a lab's python run)."""
        script = self.script.relative_to(self.root).as_posix()
        if self.torchrun:
            return ["torchrun", *self.torchrun_flags, script, *self.args]
        return ["python", script, *self.args]

    @property
    def torchrun_flags(self):
        return ["--standalone", f"--nproc_per_node={self.torchrun}"]

    def argv(self, json_path):
        """What the build starts: the reader's command, with this Python."""
        if self.torchrun:
            launcher = [sys.executable, "-m", "torch.distributed.run", *self.torchrun_flags]
            return [*launcher, str(self.script), *self.args]
        if self.plain:
            return [sys.executable, str(self.script), *self.args]
        return [sys.executable, str(self.script), *self.args, "--json", str(json_path)]

    @functools.cached_property
    def sources(self):
        """The script and every project module it imports, directly or not, in a stable order.

        Computed once per LabRun: a build (and each rebuild of `mkdocs serve`, which reloads
        the config) makes new LabRuns, so an edited source is always seen.
        """
        seen, todo = [], [self.script]
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.append(path)
            todo.extend(project_imports(path, self.root))
        return sorted(seen)

    @functools.cached_property
    def input_files(self):
        """The files the `inputs` globs match; a glob that matches none is an error."""
        found = set()
        for pattern in self.inputs:
            matched = {path.resolve() for path in self.root.glob(pattern) if path.is_file()}
            if not matched:
                raise LabError(f"lab run {self.name!r}: input {pattern!r} matches no file")
            found |= matched
        return sorted(found)

    def cache_key(self):
        digest = hashlib.sha256()
        for path in sorted(set(self.sources) | set(self.input_files)):
            digest.update(path.relative_to(self.root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
        digest.update(f"torch=={installed_torch()}\0python=={platform.python_version()}\0".encode())
        digest.update(json.dumps([self.torchrun, self.args]).encode())
        if self.plain_python:
            digest.update(b"plain")
        return digest.hexdigest()[:16]


def project_imports(path, root):
    """Modules of this project that `path` imports: siblings, or modules in code/."""
    stat = path.stat()  # a file edited under `mkdocs serve` is parsed again
    return imports_of(path, root, stat.st_mtime_ns, stat.st_size)


@functools.cache
def imports_of(path, root, mtime_ns, size):
    tree = ast.parse(path.read_bytes(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    found = []
    for name in sorted(names):
        for folder in (path.parent, root / "code"):
            candidate = folder / f"{name}.py"
            if candidate.is_file():
                found.append(candidate.resolve())
                break
    return found


@functools.cache
def installed_torch():
    """torch's version without importing torch (an import costs seconds; metadata costs none,
    but a build asks a hundred times)."""
    return importlib.metadata.version("torch")


def cache_root(root):
    return pathlib.Path(os.environ.get("LAB_CACHE_DIR", root / ".cache" / "labs"))


# ---------------------------------------------------------------------------------------------
# Running a lab
# ---------------------------------------------------------------------------------------------
def git_commit(root):
    """The commit the sources are at, with -dirty when code/ or hooks/ has uncommitted edits."""

    def git(*args):
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=10
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--", "code", "hooks")
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git commit to name)"
    return head + ("-dirty" if dirty else "")


def execute(run):
    """Start the lab as a reader would, wait at most its time limit, and return its record.

    The lab gets a process group of its own, so that on a timeout the ranks it spawned are
    killed with it instead of outliving the build. It also gets a directory of its own as
    TMPDIR, which the runner removes after any ending, a timeout included: whatever the lab or
    its ranks leave in their temp dirs (stores, error files) goes with it.

    A plain script (torchrun: N, or plain: true) starts in that directory, so that what it
    writes in the current folder (a checkpoint) goes too; its record holds all it printed,
    stderr included (torchrun's OMP_NUM_THREADS banner), as a terminal shows it.

    The record also says what the run left behind, for the tests to judge (the build ends it
    and says nothing): `left_processes`, the pids still alive in its session when it exited,
    and `left_files`, what it left in that directory besides its JSON and torch's own folders.
    """
    timeout = time_limit(run)  # measured before the clock starts, and handed to the lab
    with tempfile.TemporaryDirectory(prefix=f"lab-{run.name}-") as scratch:
        json_path = pathlib.Path(scratch) / "result.json"
        argv = run.argv(json_path)
        started = datetime.datetime.now(datetime.UTC)
        clock = time.perf_counter()
        # Output goes to files, not pipes: a pipe's reader waits until every process holding
        # its end has gone, and a process the lab left would hold the run to its timeout.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                argv,
                cwd=scratch if run.plain else run.root,
                stdout=out,
                stderr=subprocess.STDOUT if run.plain else err,
                start_new_session=True,
                env=lab_environment(run, scratch),
            )
            try:
                proc.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                timed_out = True
            finally:
                left_processes = kill_leftovers(proc.pid)  # none is left to write
            stdout, stderr = (printed(file) for file in (out, err))
        wall = time.perf_counter() - clock
        if run.plain:
            stderr = None  # it went to stdout, in the order a terminal shows
        if timed_out:
            what = f"timed out after {timeout:.0f} s (its {run.timeout:g} s at this machine's pace)"
            raise LabFailed(run, what, stdout, stderr)
        if proc.returncode != 0:
            raise LabFailed(run, f"exited with status {proc.returncode}", stdout, stderr)
        if TRACEBACK in stdout:
            raise LabFailed(run, "printed a traceback", around_traceback(stdout), None)
        if run.plain:  # the script reports nothing but its output: say where it ran
            result = {"env": code_module(run.root, "provenance").machine_facts(installed_torch())}
        elif not json_path.is_file():
            raise LabFailed(run, "wrote no --json file", stdout, stderr)
        else:
            result = json.loads(json_path.read_text())
        left_files = sorted(
            path.name
            for path in pathlib.Path(scratch).iterdir()
            if path != json_path and not path.name.startswith(TORCH_OWN)
        )
    return {
        "name": run.name,
        "command": run.command,
        "key": run.cache_key(),
        "started_utc": started.strftime("%Y-%m-%d %H:%M UTC"),
        "wall_s": round(wall, 2),
        "git_commit": git_commit(run.root),
        "stdout": stdout,
        "stderr": stderr or "",
        "result": result,
        "left_processes": left_processes,
        "left_files": left_files,
    }


@functools.cache
def code_module(root, name):
    """A module of `root`'s code/, loaded by path."""
    spec = importlib.util.spec_from_file_location(name, root / "code" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pace():
    """The course's code/pace.py (whichever site is built): every time limit of the build is
    written for its reference machine and stretched by `pace().limit` on a slower one."""
    return code_module(ROOT, "pace")


def time_limit(run):
    """The run's declared timeout, at this machine's pace."""
    return pace().limit(run.timeout)


def lab_environment(run, scratch):
    """The build's environment, with TMPDIR set to the run's own directory. A torchrun run
    starts as from a fresh shell, without OMP_NUM_THREADS, so that the launcher's notice about
    it, which chapter 1 shows and explains, is printed whatever the build's shell set."""
    env = dict(os.environ, TMPDIR=scratch)
    if run.torchrun:
        env.pop("OMP_NUM_THREADS", None)
    return env


def printed(file):
    """What a run wrote to `file`, as text, its line ends made `\n` (as a pipe read as text
    makes them)."""
    file.seek(0)
    return file.read().decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def kill_leftovers(session, grace=5.0):
    """A lab that exits must not leave ranks behind; if it did, end them and return their pids.

    Then wait, at most `grace` seconds at pace's reference, until none is left, so that no
    dying rank still writes into the directory that is removed next.
    """
    left = session_members(session)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + pace().limit(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(session, signal.SIGKILL)
        while time.monotonic() < deadline:
            os.killpg(session, 0)  # raises ProcessLookupError once the group is empty
            time.sleep(0.05)
    return left


def session_members(session):
    """Live processes (zombies aside) whose session id is `session`: /proc/PID/stat field 6.
    A lab starts in a session of its own, which every rank it starts inherits."""
    members = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if fields[0] != "Z" and int(fields[3]) == session:
            members.append(int(stat.parent.name))
    return sorted(members)


class LabError(Exception):
    """A declared run is malformed, or it failed: the build must stop."""


def around_traceback(stdout):
    """The lines of `stdout` from a little before its first traceback: what the build shows of
    a run that printed one (its stderr holds only the lab's progress)."""
    lines = stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if TRACEBACK in line)
    return "\n".join(lines[max(0, first - 10) : first + 70])


class LabFailed(LabError):
    def __init__(self, run, what, stdout, stderr):
        # 80 lines: a torchrun failure ends in ~45 lines of launcher traceback and summary,
        # and the rank's own last words (the cause) come just before them. Where there is
        # stderr, stdout's last 5 lines come first: what a lab that hung said last.
        err, out = (stderr or "").strip().splitlines(), (stdout or "").strip().splitlines()
        tail = "\n".join(
            [*out[-5:], "--- stderr:", *err[-80:]] if err and out else (err or out)[-80:]
        )
        super().__init__(f"lab run {run.name!r} ({' '.join(run.command)}) {what}:\n{tail}")


def load_record(run, cache=None):
    """The record for `run`: from its committed file, from the cache, or by running it now.

    `cache` defaults to cache_root's. Processes that share one cache run each lab once: the
    first to ask runs it, holding its key's lock, and the others wait on the lock and read its
    record. Under `nox -s tests` the build and the tests beside it share one this way.
    """
    if run.recorded is not None:
        return json.loads(run.recorded.read_text()) if run.recorded.is_file() else None
    folder = (cache or cache_root(run.root)) / f"{run.name}-{run.cache_key()}"
    folder.mkdir(parents=True, exist_ok=True)
    cached = folder / "record.json"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process dies
        if cached.is_file():
            return json.loads(cached.read_text())
        command = " ".join(run.command)
        LOG.info(f"lab {run.name}: running {command} (timeout {time_limit(run):.0f} s)")
        record = execute(run)
        LOG.info(f"lab {run.name}: finished in {record['wall_s']} s")
        cached.write_text(json.dumps(record, indent=1))
    return record


# ---------------------------------------------------------------------------------------------
# Recording a run for a page that the build cannot run (python hooks/labrunner.py record NAME)
# ---------------------------------------------------------------------------------------------
def record_main(argv):
    import yaml  # PyYAML: mkdocs depends on it; on a bare GPU node, `pip install pyyaml`

    if len(argv) != 2 or argv[0] != "record":
        sys.exit("usage: python hooks/labrunner.py record NAME")
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    spec = config.get("extra", {}).get("lab_runs", {}).get(argv[1])
    if spec is None or "recorded" not in spec:
        sys.exit(f"no lab run {argv[1]!r} with a `recorded:` file in mkdocs.yml")
    run = LabRun(argv[1], spec, ROOT)
    gpu = code_module(ROOT, "provenance").gpu_facts() if run.needs_gpu else None
    if run.needs_gpu and gpu is None:  # made on a CPU, the record would pass for a GPU run
        sys.exit(f"no CUDA device here: {run.name} is recorded on a GPU machine")
    record = execute(run)
    if run.needs_gpu and run.plain:  # plain training code does not say what GPU it ran on
        record["result"]["gpu"] = gpu
    run.record_file.parent.mkdir(parents=True, exist_ok=True)
    run.record_file.write_text(json.dumps(record, indent=1) + "\n")
    print(f"recorded {run.name} in {record['wall_s']} s -> {run.record_file.relative_to(ROOT)}")


if __name__ == "__main__":
    record_main(sys.argv[1:])
