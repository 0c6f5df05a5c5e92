"""The ring all_reduce of code/ddp/ring_allreduce.py: exact bytes, a real all_reduce, its figure.

The simulation is pure Python, so most tests import it and run it here for many ring sizes.
One run of the script as a reader starts it (three ranks, not the build's four) spawns real gloo
processes; its JSON is compared, element by element, with sums computed in this file. The last
tests read the module page that the real build made from its own four-rank run.
"""

import ast
import importlib.util
import json
import random
import re
import subprocess
import sys
from fractions import Fraction

import pytest

from site_tests.conftest import ROOT, pace

SCRIPT = ROOT / "code" / "ddp" / "ring_allreduce.py"


@pytest.fixture(scope="module")
def ring():
    spec = importlib.util.spec_from_file_location("ring_allreduce_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_inputs(p, per_chunk, seed):
    rng = random.Random(seed)
    return [[rng.randint(-1000, 1000) for _ in range(p * per_chunk)] for _ in range(p)]


def column_sums(inputs):
    return [sum(column) for column in zip(*inputs, strict=True)]


# ---------------------------------------------------------------------------------------------
# The simulation, in this process
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("per_chunk", [1, 3])
def test_every_rank_ends_with_the_elementwise_sum(ring, p, per_chunk):
    inputs = random_inputs(p, per_chunk, seed=p * 10 + per_chunk)
    final, _, _, _ = ring.simulate_ring(inputs)
    assert final == [column_sums(inputs)] * p


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 16])
def test_each_rank_sends_exactly_2_p_minus_1_over_p_of_the_buffer(ring, p):
    inputs = random_inputs(p, 2, seed=p)
    _, frames, sent, _ = ring.simulate_ring(inputs)
    size = Fraction(len(inputs[0]) * ring.ELEMENT_BYTES)  # S, in bytes
    assert [Fraction(b) for b in sent] == [2 * Fraction(p - 1, p) * size] * p
    assert all(Fraction(b) < 2 * size for b in sent)
    # half of it in each phase: (p-1)S/p by the end of the reduce-scatter
    assert frames[p - 1]["bytes_sent"] == [Fraction(p - 1, p) * size] * p


@pytest.mark.parametrize("p", [2, 4, 6])
def test_frames_follow_the_module_pages_schedule(ring, p):
    """Rank r sends chunk r-s in reduce-scatter step s and chunk r+1-s in all-gather step s."""
    inputs = random_inputs(p, 1, seed=p)
    _, frames, _, after = ring.simulate_ring(inputs)
    assert len(frames) == 2 * (p - 1) + 1 and frames[0]["phase"] == "start"
    assert frames[0]["holdings"] == [[[r]] * p for r in range(p)]
    for s in range(p - 1):
        scatter, gather = frames[1 + s], frames[p + s]
        assert scatter["phase"] == "reduce-scatter" and gather["phase"] == "all-gather"
        for r in range(p):
            assert scatter["sends"][r] == {
                "src": r,
                "dst": (r + 1) % p,
                "chunk": (r - s) % p,
                "carries": frames[s]["holdings"][r][(r - s) % p],
            }
            assert gather["sends"][r]["chunk"] == (r + 1 - s) % p
            assert gather["sends"][r]["carries"] == list(range(p))  # only complete chunks move
    everyone = list(range(p))
    after_scatter = frames[p - 1]["holdings"]
    complete = [(r, j) for r in range(p) for j in range(p) if after_scatter[r][j] == everyone]
    assert complete == [(r, (r + 1) % p) for r in range(p)]
    assert [(a["chunk"], a["owner"]) for a in after] == [(j, (j - 1) % p) for j in range(p)]
    assert frames[-1]["holdings"] == [[everyone] * p] * p


class TracedChunk:
    """A chunk that notes every addition made to it: who holds it, which chunk, what arrived."""

    def __init__(self, holder, index, ranks, log):
        self.holder, self.index, self.ranks, self.log = holder, index, ranks, log

    def __add__(self, arriving):
        self.log.append((self.holder, self.index, sorted(arriving.ranks)))
        return TracedChunk(self.holder, self.index, self.ranks | arriving.ranks, self.log)


def test_the_figure_and_the_module_pages_block_run_the_same_schedule(ring):
    """Run the page's own ring_all_reduce on traced chunks and compare its additions, step by
    step, with the sends in the figure's frames (which chunk lands where, carrying what)."""
    page = (ROOT / "docs" / "chapters" / "02-collectives.md").read_text(encoding="utf-8")
    fences = re.findall(r"^```python[^\n]*\n(.*?)^```", page, re.S | re.M)
    (source,) = [body for body in fences if "def ring_all_reduce(" in body]
    (function,) = [
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name == "ring_all_reduce"
    ]
    namespace = {}
    exec(compile(ast.Module([function], []), "02-collectives.md", "exec"), namespace)
    for p in (2, 4, 5):
        log = []
        values = [[TracedChunk(r, j, {r}, log) for j in range(p)] for r in range(p)]
        namespace["ring_all_reduce"](values)
        _, frames, _, _ = ring.simulate_ring([[0] * p for _ in range(p)])
        for s in range(1, p):
            page_step = sorted(log[(s - 1) * p : s * p])
            figure_step = sorted((x["dst"], x["chunk"], x["carries"]) for x in frames[s]["sends"])
            assert page_step == figure_step, f"p={p}, reduce-scatter step {s}"
        assert len(log) == p * (p - 1), "additions happen in the reduce-scatter phase only"


def test_bad_arguments_fail_before_torch_is_imported():
    probe = (
        "import sys; sys.path.insert(0, 'code/ddp'); import ring_allreduce\n"
        "try:\n    ring_allreduce.parse_args(['--ranks', '4', '--elements', '6'])\n"
        "except SystemExit as exit:\n    code = exit.code\n"
        "ring_allreduce.main(['--ranks', '3', '--no-real'])\n"
        "assert 'torch' not in sys.modules, 'the simulation alone must not import torch'\n"
        "print('exit code', code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=pace.limit(30),
    )
    assert proc.returncode == 0, proc.stderr
    assert "exit code 2" in proc.stdout and "multiple of --ranks" in proc.stderr
    assert "ok    simulation_equals_direct_sum" in proc.stdout


# ---------------------------------------------------------------------------------------------
# Against torch: one real run of the script, three gloo processes
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ring") / "ring.json"
    argv = [sys.executable, str(SCRIPT), "--ranks", "3", "--elements", "9", "--seed", "7"]
    proc = subprocess.run(
        [*argv, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=pace.limit(120),
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(out.read_text())


def test_real_gloo_all_reduce_equals_the_simulation(real_run):
    _, result = real_run
    p, inputs = result["ranks"], result["inputs"]
    sums = column_sums(inputs)
    assert any(row != sums for row in inputs), "inputs that already equal the sum prove nothing"
    assert result["real"]["world_size"] == p == 3
    assert result["real"]["all_reduce"] == [sums] * p  # every rank, from torch
    assert result["simulated"] == [sums] * p  # every rank, from the ring
    size = len(sums) // p
    assert result["real"]["reduce_scatter"] == [sums[j * size : (j + 1) * size] for j in range(p)]
    assert [a["values"] for a in result["after_reduce_scatter"]] == result["real"]["reduce_scatter"]
    assert result["verdict"] == "PASS" and all(result["checks"].values())


def test_the_script_prints_one_row_per_step(real_run):
    stdout, result = real_run
    rows = re.findall(r"^\s+(\d+)\s+(reduce-scatter|all-gather)\s", stdout, re.MULTILINE)
    assert [int(step) for step, _ in rows] == list(range(1, 2 * (result["ranks"] - 1) + 1))
    bytes_line = f"bytes sent per rank: {result['bytes_sent'][0]} B"
    assert bytes_line in stdout


# ---------------------------------------------------------------------------------------------
# The figure on the module page, from the build's own run
# ---------------------------------------------------------------------------------------------
def build_record(cache, name):
    (folder,) = cache.glob(f"{name}-*/")
    return json.loads((folder / "record.json").read_text())["result"]
