"""The NCCL DDP lab, code/ddp/nccl.py: what can be tested anywhere, and what needs GPUs.

Anywhere: bad arguments fail in one line with status 2 before torch is imported; a machine
without CUDA gets one line and status 2 (CUDA_VISIBLE_DEVICES="" makes any machine one); the
backend that plain "nccl" registers is the one the page names for the release (no GPU needed:
registering a backend builds no communicator); and the committed record of a GPU run,
docs/labs/recorded/ddp_nccl.json, if there is one, has the schema (site_tests/labs/schemas/) and
provenance the lab page relies on.

With CUDA: the lab runs on every visible GPU through mp.spawn, and on up to two through
torchrun, and must pass the gloo lab's checks (the ring and the control need two ranks); asking
for more ranks than GPUs is refused. Without CUDA these tests skip and say why.
"""

import json
import os
import subprocess
import sys
import time

import jsonschema
import pytest

from site_tests.conftest import ROOT, pace
from site_tests.labs.test_ddp_gloo import (
    RUN_TIMEOUT,
    Run,
    check_buckets,
    check_control,
    check_replicas,
    check_variants,
    lab_schema,
)

LAB = ROOT / "code" / "ddp" / "nccl.py"
RECORD = ROOT / "docs" / "labs" / "recorded" / "ddp_nccl.json"
SWEEP_BYTES = [4096 * 4**k for k in range(10)]  # 4 KiB to 1 GiB in powers of 4

pytestmark = pytest.mark.timeout(2 * RUN_TIMEOUT)


def assert_lab_passed(r):
    """The gloo lab's checks, with the two that need a second rank kept for world size > 1."""
    assert r["lab"] == "ddp_nccl" and r["backend"] == "nccl", r["lab"]
    assert r["collectives_ok"], r["collectives"]
    not_run = {name for name, ok in r["collectives"].items() if ok is None}
    assert not_run == ({"send_recv_ring"} if r["world_size"] == 1 else set()), r["collectives"]
    check_variants(r)
    check_replicas(r)
    check_buckets(r)
    if r["world_size"] > 1:
        check_control(r)
    assert r["verdict"] == "PASS", r["failures"]


def assert_gpu_schema(r):
    """The GPU-only keys: provenance, both sweeps, the DDP step split."""
    jsonschema.validate(r, lab_schema("nccl_lab"))
    gpu = r["gpu"]
    assert set(gpu) == {"model", "count", "capability", "memory_GiB", "driver", "cuda", "nccl"}
    assert gpu["model"] and gpu["cuda"] and gpu["nccl"] and gpu["count"] >= r["world_size"]
    for key in ("sweep", "sweep_bf16"):
        assert [row["bytes"] for row in r[key]] == SWEEP_BYTES, key
        for row in r[key]:
            assert row["seconds"] > 0 and row["memcpy_GBps"] > 0, row
            bus = row["algbw_GBps"] * 2 * (r["world_size"] - 1) / r["world_size"]
            assert row["busbw_GBps"] == pytest.approx(bus), row
    step = r["ddp_step"]
    assert step["compute_only_s"] > 0 and step["with_comm_s"] > 0 and step["buckets"] >= 1
    assert step["exposed_comm_s"] == pytest.approx(step["with_comm_s"] - step["compute_only_s"])
    assert (r["note"] is not None) == (gpu["count"] == 1)
    assert r["nccl_backend"] in ("ProcessGroupNCCL2", "ProcessGroupNCCL"), r["nccl_backend"]
    assert set(r["env"]) >= {"torch", "python", "platform", "cpu_model", "cpu_count"}


# ---------------------------------------------------------------------------------------------
# Anywhere
# ---------------------------------------------------------------------------------------------
def one_line_error(args, env):
    proc = subprocess.run(
        [sys.executable, str(LAB), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=pace.limit(60),
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert "Traceback" not in line
    return line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--world-size", "0"], "--world-size must be at least 1"),
        (["--steps", "0"], "--steps must be at least 1"),
        (["--timeout", "0"], "--timeout must be a positive number"),
        (["--json", "/no/such/dir/out.json"], "does not exist"),
        (["--torchrun"], "--torchrun needs torchrun's environment"),
        (["--world-size", "two"], "invalid int value"),
    ],
)
def test_bad_input_is_one_line_and_status_2(args, message, torch_refuses):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    env["PYTHONPATH"] = str(torch_refuses)
    started = time.monotonic()
    assert message in one_line_error(args, env)
    assert time.monotonic() - started < pace.limit(5)  # an import of torch would take seconds


def test_no_cuda_is_one_line_and_status_2():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    line = one_line_error([], env)
    assert "no CUDA device is visible" in line and "gloo lab" in line, line


# What `dist.init_process_group("nccl")` would build, asked without a GPU: the creator that
# registering each NCCL name installs. TORCH_DIST_USE_NCCL2 is read once, at registration.
REGISTERED_CREATORS = """
import json
import torch.distributed as dist
from importlib.metadata import entry_points

names = {ep.name for ep in entry_points(group="torch.distributed.backends")}
found = {}
for name in ("nccl", "nccl2", "nccl-legacy"):
    if name in names:
        dist.Backend._ensure_backend_registered(name)
        found[name] = dist.Backend._plugins[name.upper()].creator_fn.__name__
print(json.dumps(found))
"""
NCCL2, LEGACY = "_create_nccl2_process_group", "_create_nccl_process_group"


def registered_creators(switch):
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DIST_USE_NCCL2"}
    if switch is not None:
        env["TORCH_DIST_USE_NCCL2"] = switch
    proc = subprocess.run(
        [sys.executable, "-c", REGISTERED_CREATORS],
        capture_output=True,
        text=True,
        env=env,
        timeout=pace.limit(60),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("switch", [None, "0", "1"], ids=["unset", "USE_NCCL2=0", "USE_NCCL2=1"])
def test_default_nccl_backend(switch):
    """The page: 2.15 builds nccl2 for "nccl" unless TORCH_DIST_USE_NCCL2=0, "nccl-legacy" is
    the old one; 2.14 builds the old one unless =1; 2.13 has neither name."""
    from site_tests.tools.fence_plugin import expected_release

    release, creators = expected_release(), registered_creators(switch)
    if release < (2, 14):
        assert "nccl2" not in creators and "nccl-legacy" not in creators, creators
        return
    assert creators["nccl2"] == NCCL2 and creators["nccl-legacy"] == LEGACY, creators
    default_is_nccl2 = switch != "0" if release >= (2, 15) else switch == "1"
    assert creators["nccl"] == (NCCL2 if default_is_nccl2 else LEGACY), creators


def test_recorded_gpu_run_has_schema_and_provenance():
    if not RECORD.is_file():
        pytest.skip(f"no GPU run recorded yet ({RECORD.relative_to(ROOT)}; `nox -s record-gpu`)")
    record = json.loads(RECORD.read_text())
    assert {"name", "command", "started_utc", "wall_s", "git_commit", "stdout", "result"} <= set(
        record
    )
    assert record["name"] == "nccl" and "nccl.py" in " ".join(record["command"])
    r = record["result"]
    assert_lab_passed(r)
    assert_gpu_schema(r)
    assert r["gpu"]["model"] in record["stdout"] and "verdict: PASS" in record["stdout"]


# ---------------------------------------------------------------------------------------------
# With CUDA
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpus():
    """How many GPUs torch sees; skips the GPU tests where there are none."""
    import torch  # only the GPU tests pay for the import

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the NCCL lab needs at least one GPU")
    return torch.cuda.device_count()


@pytest.fixture(scope="module")
def spawned(gpus, tmp_path_factory):
    spec = {"script": LAB, "args": []}
    return Run("nccl_spawn", spec, tmp_path_factory.mktemp("nccl") / "spawn").execute()


@pytest.fixture(scope="module")
def torchrun(gpus, tmp_path_factory):
    spec = {"script": LAB, "args": ["--torchrun"], "torchrun": True, "nproc": min(2, gpus)}
    return Run("nccl_torchrun", spec, tmp_path_factory.mktemp("nccl") / "torchrun").execute()


def test_spawn_over_every_gpu_passes(spawned, gpus):
    assert spawned.returncode == 0, spawned.explain()
    assert spawned.results["world_size"] == gpus
    assert_lab_passed(spawned.results)
    assert_gpu_schema(spawned.results)
    assert spawned.stdout.count("verdict: PASS") == 1


def test_torchrun_passes(torchrun, gpus):
    assert torchrun.returncode == 0, torchrun.explain()
    assert torchrun.results["launcher"] == "torchrun"
    assert torchrun.results["world_size"] == min(2, gpus)
    assert_lab_passed(torchrun.results)


@pytest.mark.parametrize("which", ["spawned", "torchrun"])
def test_gpu_runs_leave_nothing_behind(which, request):
    run = request.getfixturevalue(which)
    assert run.survivors == [] and run.leftovers == [], (run.survivors, run.leftovers)


def test_more_ranks_than_gpus_is_refused(gpus):
    line = one_line_error(["--world-size", str(gpus + 1)], dict(os.environ))
    assert f"{gpus + 1} ranks on this machine need {gpus + 1} GPUs" in line, line
