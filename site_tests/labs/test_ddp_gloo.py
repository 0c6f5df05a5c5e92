"""The gloo DDP lab, code/ddp/gloo.py, run as real processes and judged by its JSON.

Every run the selected tests need starts at once when the module's first such test asks, each in
a thread of its own, so their imports and waits overlap on a small machine. Four of them must
pass side by side (spawn at world size 2 with the site's arguments, forkserver at 2 and 3,
torchrun on a free port below the range the OS hands out); the others inject a crash or skip a
collective from outside the script (site_tests/tools/lab_faults.py), or break the lab on purpose to
show that the assertions have teeth. Each run carries a unique marker in its environment, which
every process it starts inherits: a process still holding the marker after the run is a leak.
Each run also gets a fresh TMPDIR, which must be empty again at the end. What the --json file
holds is written down once, as a JSON Schema in site_tests/labs/schemas/ (the NCCL lab's extends the
gloo lab's), and every passing run is checked against it.

Argument errors need no run: they must fail in milliseconds, before torch is imported, which a
fake `torch` package that refuses to import makes certain.
"""

import concurrent.futures
import contextlib
import json
import os
import pathlib
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import jsonschema
import psutil
import pytest

from site_tests.conftest import ROOT, pace

CODE = ROOT / "code"
LAB = CODE / "ddp" / "gloo.py"
SHARED = CODE / "ddp" / "ddp_common.py"
FAULTS = ROOT / "site_tests" / "tools" / "lab_faults.py"  # runs a lab with one rank made to fail
SCHEMAS = ROOT / "site_tests" / "labs" / "schemas"
RUN_TIMEOUT = 120  # seconds for one lab process, start to finish
MARKER = "DDP_LAB_TEST_MARKER"
VARIANTS = ("naive", "ddp", "ddp_no_sync")
# torch's own directories, not the lab's: `import torch` alone makes the inductor cache dir in
# TMPDIR, and torchrun keeps its workers' logs in a torchelastic_* dir.
TORCH_OWN = ("torchinductor_", "torchelastic_")

# Written for pace's reference machine, like every limit of the suite (code/pace.py).
# The crash run's patience: a rank left to sit it out is a failure.
CRASH_TIMEOUT_S = round(pace.limit(100))
SKIP_TIMEOUT_S = round(pace.limit(4), 1)  # the skip run's: healthy ranks meet well within it
SLACK_S = 10  # two runs started together, the same work ahead: how far apart their ends may fall
LEAVE_S = 5  # after a run, for its processes to vanish (a forkserver sees its parent go)

pytestmark = pytest.mark.timeout(2 * RUN_TIMEOUT)


# ---------------------------------------------------------------------------------------------
# The runs
# ---------------------------------------------------------------------------------------------
# name -> how to run it. `args` go to the lab; `torchrun` starts it under torchrun instead of
# mp.spawn (with `nproc` ranks, default 2); `mutate` = (old, new) is applied to a copy of
# ddp_common.py that the run imports; `fault` ("crash:R", "skip:R") has lab_faults.py start the
# script with rank R made to fail; `script` replaces the gloo lab (the NCCL tests use it).
RUNS = {
    "ws2": {"args": ["--world-size", "2", "--steps", "5", "--sweep"]},  # what the site runs
    # 16 samples over 3 ranks: the sampler pads. A forkserver imports torch once, not 3 times.
    "ws3": {"args": ["--world-size", "3", "--start-method", "forkserver"]},
    "ws2_forkserver": {"args": ["--world-size", "2", "--start-method", "forkserver"]},
    "torchrun": {"args": ["--torchrun"], "torchrun": True},
    "crash": {"fault": "crash:1", "args": ["--timeout", str(CRASH_TIMEOUT_S)]},
    "skip": {
        "fault": "skip:1",
        "args": ["--timeout", str(SKIP_TIMEOUT_S), "--start-method", "forkserver"],
    },
    "broken_average": {
        "args": ["--start-method", "forkserver"],
        "mutate": ("param.grad.div_(world_size)", "param.grad.div_(world_size - 1)"),
    },
    "no_broadcast": {
        "args": ["--start-method", "forkserver"],
        "mutate": ("dist.broadcast(param.detach(), src=0)", "pass  # teeth: no broadcast"),
    },
}
TOGETHER = ("ws2", "ws3", "ws2_forkserver", "torchrun")  # the four that must pass side by side
# Tests that need runs without taking one as their `run` parameter.
ALSO_NEEDS = {
    "test_four_runs_at_once_all_pass": TOGETHER,
    # The fault runs are timed against a passing run that started with them, same launcher.
    "test_crashing_rank_ends_the_run": ("ws2",),
    "test_skipped_collective_names_the_missing_rank": ("ws2_forkserver",),
}


class Run:
    """One lab process: how it was started, what it printed and wrote, what it left behind."""

    def __init__(self, name, spec, workdir):
        self.name, self.spec, self.workdir = name, spec, workdir
        self.marker = f"{name}-{uuid.uuid4().hex}"
        self.json_path = workdir / "result.json"

    def command(self):
        script = self.spec.get("script", LAB)
        if "mutate" in self.spec:
            script = copy_with_mutation(self.workdir / "lab", *self.spec["mutate"])
        program = [str(script), *self.spec["args"]]
        if "fault" in self.spec:
            program = [str(FAULTS), self.spec["fault"], *program]
        if self.spec.get("torchrun"):
            launcher = [
                "-m", "torch.distributed.run", "--nnodes=1",
                f"--nproc_per_node={self.spec.get('nproc', 2)}",
                "--master_addr=127.0.0.1", f"--master_port={free_port()}",
            ]  # fmt: skip
            return [sys.executable, *launcher, *program]
        return [sys.executable, *program]

    def execute(self):
        self.workdir.mkdir(parents=True)
        # A short TMPDIR of its own: a forkserver's socket path must stay under ~100 bytes.
        tmpdir = pathlib.Path(tempfile.mkdtemp(prefix="lab-"))
        env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(CODE))
        env[MARKER] = self.marker
        command = [*self.command(), "--json", str(self.json_path)]
        self.started = time.monotonic()
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        try:
            self.stdout, self.stderr = proc.communicate(timeout=pace.limit(RUN_TIMEOUT))
        except subprocess.TimeoutExpired:
            proc.kill()
            self.stdout, self.stderr = proc.communicate()
        self.ended = time.monotonic()
        self.seconds = self.ended - self.started
        self.returncode = proc.returncode
        self.survivors = end_marked_processes(self.marker, grace=pace.limit(LEAVE_S))
        self.leftovers = sorted(
            p.name for p in tmpdir.iterdir() if not p.name.startswith(TORCH_OWN)
        )
        shutil.rmtree(tmpdir)
        self.results = json.loads(self.json_path.read_text()) if self.json_path.exists() else None
        return self

    def explain(self):
        return (
            f"{self.name}: exit {self.returncode}\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )


def copy_with_mutation(folder, old, new):
    """The lab in `folder`, next to a copy of ddp_common.py with `old` replaced by `new`.

    The script imports ddp_common from its own folder first, so the copy wins; provenance.py still
    comes from code/ through PYTHONPATH.
    """
    source = SHARED.read_text()
    if source.count(old) != 1:
        raise AssertionError(f"teeth: expected {old!r} exactly once in {SHARED.name}")
    folder.mkdir()
    (folder / SHARED.name).write_text(source.replace(old, new))
    (folder / LAB.name).write_text(LAB.read_text())
    return folder / LAB.name


# Where the OS takes the ports it hands out unasked (binding port 0, an outgoing connection).
EPHEMERAL_RANGE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
TORCHRUN_DEFAULT_PORT = 29500  # what a torchrun started without --master_port takes


def free_port():
    """A TCP port nobody listens on now, and one that the OS does not give away meanwhile.

    torchrun binds it only seconds later, after importing torch. A port that the OS picked
    lies in its ephemeral range, which it keeps handing out to any socket, and the runs started
    beside this one bind and connect dozens of gloo sockets in those seconds: one of them could
    take it. A port below that range goes only to a process that asks for it by number.
    """
    below = [p for p in range(10_000, ephemeral_start()) if p != TORCHRUN_DEFAULT_PORT]
    # SystemRandom: runs side by side must not draw the same ports from one seed
    for port in random.SystemRandom().sample(below, k=min(100, len(below))):
        if bindable(port):
            return port
    raise AssertionError(f"no free TCP port between 10000 and {ephemeral_start()}")


def ephemeral_start():
    """The lowest port of the OS's ephemeral range (Linux's default where it cannot be read)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def bindable(port):
    """Whether nothing holds `port` now, on any address (torchrun's store binds them all)."""
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def marked_processes(marker):
    """Live processes whose environment holds MARKER=marker."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone (a zombie too), or not ours
            continue
    return found


def end_marked_processes(marker, grace):
    """Give the run's processes `grace` seconds to vanish; kill any that stay, return their pids."""
    deadline = time.monotonic() + grace
    while (procs := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for proc in procs:
        # psutil checks that the pid still names the process it found, not a newcomer
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    return [proc.pid for proc in procs]


def wanted_runs(request):
    """The runs that the selected tests of this module use."""
    wanted = set()
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "run" in callspec.params:
            wanted.add(callspec.params["run"])
        wanted.update(ALSO_NEEDS.get(item.originalname, ()))
    return sorted(wanted)


@pytest.fixture(scope="module")
def launched(request, tmp_path_factory):
    """Start every wanted run at the same moment, one thread each: name -> Future[Run]."""
    names = wanted_runs(request)
    base = tmp_path_factory.mktemp("gloo-runs")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        yield {name: pool.submit(Run(name, RUNS[name], base / name).execute) for name in names}


@pytest.fixture
def run(request, launched):
    """The finished run named by the test's `run` parameter."""
    return launched[request.param].result(timeout=pace.limit(RUN_TIMEOUT + 30))


def by_run(*names):
    return pytest.mark.parametrize("run", names, indirect=True)


# ---------------------------------------------------------------------------------------------
# What a correct run shows (the teeth tests feed these broken runs)
# ---------------------------------------------------------------------------------------------
def lab_schema(extension=None):
    """The JSON Schema of the gloo lab's --json file, or of a lab's that extends it (nccl_lab)."""
    schema = json.loads((SCHEMAS / "gloo_lab.json").read_text())
    if extension:
        more = json.loads((SCHEMAS / f"{extension}.json").read_text())
        schema["properties"] |= more["properties"]
        schema["required"] += more["required"]
    return schema


def check_collectives(r):
    assert r["collectives_ok"], r["collectives"]
    assert all(ok is True for ok in r["collectives"].values()), r["collectives"]


def check_variants(r):
    for name in VARIANTS:
        diff = r["variants"][name]["max_abs_diff"]
        # "lands on the reference to float64 rounding", the page says: ulps, not 1e-6
        assert diff <= r["thresholds"]["variant_max"] <= 1e-12, f"{name} is {diff:.3g} off"


def check_control(r):
    assert r["control_max_abs_diff"] > 1e-3, "the control matches: the comparison has no teeth"


def check_replicas(r):
    assert r["replicas_identical"], r["variants"]
    assert all(r["variants"][name]["replicas_identical"] is True for name in VARIANTS)


def check_buckets(r):
    assert r["ddp_buckets"] >= 1
    assert len(r["ddp_bucket_bytes"]) == r["ddp_buckets"]


CHECKS = [check_collectives, check_variants, check_control, check_replicas, check_buckets]


# ---------------------------------------------------------------------------------------------
# Passing runs
# ---------------------------------------------------------------------------------------------
@by_run(*TOGETHER)
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_lab_result(run, check):
    assert run.returncode == 0, run.explain()
    check(run.results)


@by_run(*TOGETHER)
def test_only_rank_0_prints_one_report(run):
    assert run.returncode == 0, run.explain()
    assert run.stdout.count("verdict: PASS") == 1, run.stdout
    assert run.stdout.count("training run") == 1, run.stdout
    assert "Traceback" not in run.stdout + run.stderr


@by_run(*TOGETHER)
def test_json_describes_the_run(run):
    r = run.results
    jsonschema.validate(r, lab_schema())
    assert r["lab"] == "ddp_gloo" and r["backend"] == "gloo" and r["verdict"] == "PASS"
    assert r["launcher"] == ("torchrun" if run.name == "torchrun" else "mp.spawn")
    assert r["per_rank"] * r["world_size"] == r["samples"] + r["padded"]
    assert set(r["api"].values()) <= {
        "all_gather_single", "all_gather_into_tensor",
        "reduce_scatter_single", "reduce_scatter_tensor",
    }  # fmt: skip
    # The lab page: gloo's reduce_scatter and reduce average, and an integer AVG raises.
    assert r["reduce_scatter_avg_behaviour"] == "averages"
    avg = r["avg_beyond_all_reduce"]
    assert avg["reduce_avg_on_dst"] == (r["world_size"] + 1) / 2
    assert avg["integer_all_reduce_avg"] == "raises RuntimeError"
    for key in ("seconds", "algbw_GBps", "busbw_GBps"):
        assert r["allreduce_4mib"][key] > 0
    assert r["allreduce_4mib"]["bytes"] == r["memcpy_4mib"]["bytes"] == 4 << 20
    assert r["busbw_over_memcpy"] == pytest.approx(
        r["allreduce_4mib"]["busbw_GBps"] / r["memcpy_4mib"]["GBps"]
    )
    assert set(r["env"]) >= {"torch", "python", "platform", "cpu_model", "cpu_count"}


@by_run("ws3")
def test_world_size_3_pads_the_shards(run):
    r = run.results
    assert (r["world_size"], r["per_rank"], r["padded"]) == (3, 6, 2)


@by_run("ws2")
def test_sweep_covers_4_kib_to_64_mib(run):
    sweep = run.results["sweep"]
    assert [row["bytes"] for row in sweep] == [4096 * 4**k for k in range(8)]
    for row in sweep:
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"])  # 2(p-1)/p = 1 at p = 2
        assert row["seconds"] > 0 and row["memcpy_GBps"] > 0


def test_four_runs_at_once_all_pass(launched):
    runs = [launched[name].result(timeout=pace.limit(RUN_TIMEOUT + 30)) for name in TOGETHER]
    assert all(run.returncode == 0 for run in runs), [run.explain() for run in runs]
    assert max(run.started for run in runs) < min(run.ended for run in runs), "not concurrent"


@by_run(*RUNS)
def test_run_leaves_nothing_behind(run):
    assert run.survivors == [], f"{run.name}: processes outlived the run: {run.survivors}"
    assert run.leftovers == [], f"{run.name}: left in TMPDIR: {run.leftovers}"


# ---------------------------------------------------------------------------------------------
# Faults: a rank that raises, a rank that skips a collective
# ---------------------------------------------------------------------------------------------
def finished(launched, name):
    return launched[name].result(timeout=pace.limit(RUN_TIMEOUT + 30))


@by_run("crash")
def test_crashing_rank_ends_the_run(run, launched):
    assert run.returncode == 1, run.explain()
    (line,) = run.stderr.strip().splitlines()
    assert "rank 1" in line and "injected fault" in line, line
    # The other rank was ended at once, not left to sit out its timeout: the run takes no
    # longer than a whole passing run that started at the same moment. Both share the machine
    # with the other runs, and their starts, most of either, can end up to SLACK_S apart.
    whole = finished(launched, "ws2").seconds
    bound = min(CRASH_TIMEOUT_S, whole + pace.limit(SLACK_S))
    assert run.seconds < bound, f"{run.seconds:.1f} s, a full run {whole:.1f} s"


@by_run("skip")
def test_skipped_collective_names_the_missing_rank(run, launched):
    assert run.returncode == 1, run.explain()
    (line,) = run.stderr.strip().splitlines()
    missing = f"rank 1 did not reach phase 'replicas' within {SKIP_TIMEOUT_S:g} s"
    assert missing in line, line
    # It waited out the timeout, then ended by itself: about a passing run plus the timeout.
    whole = finished(launched, "ws2_forkserver").seconds
    bound = whole + SKIP_TIMEOUT_S + pace.limit(SLACK_S)
    assert SKIP_TIMEOUT_S <= run.seconds < bound, f"{run.seconds:.1f} s, a full run {whole:.1f} s"


# ---------------------------------------------------------------------------------------------
# Teeth: break the lab on purpose; the checks above must notice
# ---------------------------------------------------------------------------------------------
@pytest.mark.teeth
@pytest.mark.parametrize(
    ("run", "failing"),
    [
        ("broken_average", [check_variants]),
        ("no_broadcast", [check_variants, check_replicas]),
    ],
    indirect=["run"],
)
def test_checks_catch_a_broken_lab(run, failing):
    assert run.results is not None, run.explain()
    assert run.results["verdict"] == "FAIL" and run.returncode == 1, run.explain()
    for check in failing:
        with pytest.raises(AssertionError):
            check(run.results)


# ---------------------------------------------------------------------------------------------
# Bad input: one line, exit status 2, before torch is imported
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--world-size", "0"], "--world-size must be at least 1"),
        (["--world-size", "-2"], "--world-size must be at least 1"),
        (["--steps", "0"], "--steps must be at least 1"),
        (["--timeout", "0"], "--timeout must be a positive number"),
        (["--timeout", "-5"], "--timeout must be a positive number"),
        (["--json", "/no/such/dir/out.json"], "does not exist"),
        (["--torchrun"], "--torchrun needs torchrun's environment"),
        (["--steps", "five"], "invalid int value"),
    ],
)
def test_bad_input_is_one_line_and_status_2(args, message, torch_refuses, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    env.update(PYTHONPATH=str(torch_refuses), TMPDIR=str(tmp_path))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(LAB), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=pace.limit(30),
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert message in line and "Traceback" not in line, line
    assert time.monotonic() - started < pace.limit(5)  # an import of torch would take seconds
    assert list(tmp_path.iterdir()) == []  # no run directory was made
