"""Measure the issues' speed figures side by side with `python -c "import torch"`, in one run.

    python site_tests/tools/measure_figures.py        (or: python3 -m nox -s figures)

Each command runs a few times, interleaved with the torch import it is compared against, so
that a change in the machine's load touches both; the table gives medians and their ratio.
Nothing here is asserted: the figures are targets to report, not tests.
"""

import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
PY = sys.executable
sys.path.insert(0, str(ROOT))
import noxfile  # noqa: E402  (how `nox -s serve` runs mkdocs serve)


def wall(command, env=None, repeat=3):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def serve_latency(env, page="docs/glossary.md", path="glossary/", edits=3):
    """Seconds from saving a prose edit to the page `mkdocs serve` returns showing it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/{path}"
    source = ROOT / page
    original = source.read_text(encoding="utf-8")
    server = subprocess.Popen(
        [PY, "-m", "mkdocs", "serve", "--strict", "--dev-addr", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    latencies = []
    try:
        deadline = time.monotonic() + 600  # the first build may run labs
        while "Glossary" not in fetch(url):
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("mkdocs serve never served the page")
            time.sleep(0.5)
        for n in range(edits):
            marker = f"proseedit{n}marker"
            source.write_text(original + f"\n{marker}\n", encoding="utf-8")
            start = time.perf_counter()
            while marker not in fetch(url):
                if time.perf_counter() - start > 60:
                    raise RuntimeError("the edit never showed")
                time.sleep(0.05)
            latencies.append(time.perf_counter() - start)
            time.sleep(1)
    finally:
        source.write_text(original, encoding="utf-8")
        server.terminate()
        server.wait(timeout=30)
    return statistics.median(latencies)


def main():
    cold_cache = tempfile.mkdtemp(prefix="figures-cache-")
    env_cold = dict(os.environ, LAB_CACHE_DIR=cold_cache)
    rows = []
    try:
        baseline = wall([PY, "-c", "import torch"], repeat=5)
        rows.append(("python -c 'import torch'", baseline))
        rows.append(("nox -s fences", wall(["python3", "-m", "nox", "-s", "fences"])))
        rows.append(
            (
                "gloo lab, world size 2, 5 steps",
                wall([PY, "code/ddp/gloo.py", "--world-size", "2", "--steps", "5"], repeat=5),
            )
        )
        start = time.perf_counter()
        subprocess.run(
            [PY, "-m", "mkdocs", "build", "--strict", "--site-dir", f"{cold_cache}/site"],
            cwd=ROOT,
            env=env_cold,
            check=True,
            capture_output=True,
        )
        cold = time.perf_counter() - start
        labs = sum(
            json.loads(path.read_text())["wall_s"]
            for path in pathlib.Path(cold_cache).glob("*/record.json")
        )
        rows.append(("mkdocs build, cold cache", cold))
        rows.append(("  of which the labs' own wall time", labs))
        subprocess.run(
            ["python3", "-m", "nox", "-s", "build"], cwd=ROOT, check=True, capture_output=True
        )  # brings .cache/labs up to date: the next are warm
        rows.append(("nox -s build, warm cache", wall(["python3", "-m", "nox", "-s", "build"])))
        rows.append(("nox -s serve, prose edit visible", serve_latency(noxfile.SERVE_ENV)))
        rows.append(("  the same, search index included", serve_latency({"SITE_SEARCH": "true"})))
        rows.append(("import torch, again", wall([PY, "-c", "import torch"], repeat=5)))
    finally:
        shutil.rmtree(cold_cache, ignore_errors=True)
    print(f"{'command':42} {'median s':>9} {'× import torch':>15}")
    for name, seconds in rows:
        print(f"{name:42} {seconds:9.2f} {seconds / baseline:15.2f}")


if __name__ == "__main__":
    main()
