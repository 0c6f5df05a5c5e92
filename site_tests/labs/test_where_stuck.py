"""code/debugging/where_stuck.py: `py-spy dump` on every rank of a live hang, as chapter 6 shows it.

The script runs once per mode for the whole module. Hung, rank 0 must be found in all_reduce
and rank 1 in barrier, at line numbers whose text in the script is those two calls; the dumps
it prints must be py-spy's; afterwards no rank and no temporary folder may be left. Fixed
(every rank all-reduces), it must report "not stuck". A copy of the script with the bug
removed by hand must fail its hang run, and a copy with its lines shifted must report the
shifted lines: the numbers come from the live processes, not from the script's own text.
The committed record (the page where the build is not root) must still match the script;
test_site_build.py checks that the built chapter shows the dump.
"""

import ast
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from site_tests.conftest import ROOT, pace, processes_naming

SCRIPT = ROOT / "code" / "debugging" / "where_stuck.py"
RECORDED = ROOT / "docs" / "labs" / "recorded" / "where_stuck.json"
RUN_TIMEOUT = 60  # seconds at pace's reference: the script's own deadline is 30
IS_ROOT = os.geteuid() == 0

pytestmark = pytest.mark.timeout(6 * RUN_TIMEOUT)  # conftest stretches it for the machine


def where_stuck(tmp, *args, script=SCRIPT, env=None):
    """Run the script with TMPDIR in `tmp`; return (process, its JSON or None)."""
    (tmp / "tmp").mkdir(parents=True, exist_ok=True)
    out = tmp / "result.json"
    proc = subprocess.run(
        [sys.executable, str(script), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=pace.limit(RUN_TIMEOUT),
        env={**os.environ, "TMPDIR": str(tmp / "tmp"), **(env or {})},
        cwd=ROOT,
    )
    if proc.returncode == 2 and not IS_ROOT and "could not read" in proc.stderr:
        pytest.skip(f"py-spy may not read another process here: {proc.stderr.strip()}")
    return proc, (json.loads(out.read_text()) if out.is_file() else None)


@pytest.fixture(scope="module")
def hung(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hung")
    return (*where_stuck(folder), folder)


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fixed")
    return (*where_stuck(folder, "--fixed"), folder)


def call_lines(script, function):
    """{line number: stripped text} of the lines inside `function` in `script`."""
    source = script.read_text()
    (node,) = [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.FunctionDef) and n.name == function
    ]
    lines = source.splitlines()
    return {n: lines[n - 1].strip() for n in range(node.lineno, node.end_lineno + 1)}


def assert_points_at_the_calls(ranks, script=SCRIPT):
    """Rank 0's line is the all_reduce, rank 1's the barrier, both in the buggy function."""
    body = call_lines(script, "log_on_rank0_then_barrier")
    rank0, rank1 = ranks
    assert rank0["line"] in body and body[rank0["line"]].startswith("dist.all_reduce("), rank0
    assert rank1["line"] in body and body[rank1["line"]].startswith("dist.barrier("), rank1


def assert_every_frame_is_in_its_function(stdout, script=SCRIPT):
    """Each frame of the script that `stdout` shows, `function (file:line)`, names a line that
    lies inside that function in the script as it is now (`<module>`: outside every def)."""
    tree = ast.parse(script.read_text())
    spans = {
        n.name: range(n.lineno, n.end_lineno + 1)
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef)
    }
    frames = re.findall(rf"^    (\S+) \({re.escape(script.name)}:(\d+)\)$", stdout, re.MULTILINE)
    assert len(frames) >= 2 * 3, stdout  # every rank: the buggy function, run_rank, <module>
    for function, line in frames:
        if function == "<module>":
            assert not any(int(line) in span for span in spans.values()), line
        else:
            assert int(line) in spans[function], (function, line)


# ---------------------------------------------------------------------------------------------
# The hang, dumped
# ---------------------------------------------------------------------------------------------
def test_rank0_waits_in_all_reduce_and_rank1_in_barrier(hung):
    proc, result, _ = hung
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["state"] == "stuck"
    rank0, rank1 = result["ranks"]
    assert (rank0["collective"], rank0["in_all_reduce"], rank0["in_barrier"]) == (
        "all_reduce",
        True,
        False,
    )
    assert (rank1["collective"], rank1["in_all_reduce"], rank1["in_barrier"]) == (
        "barrier",
        False,
        True,
    )
    assert {rank0["function"], rank1["function"]} == {"log_on_rank0_then_barrier"}
    assert {rank0["file"], rank1["file"]} == {SCRIPT.name}


def test_line_numbers_are_those_of_the_calls_in_the_script(hung):
    proc, result, _ = hung
    assert_points_at_the_calls(result["ranks"])
    assert_every_frame_is_in_its_function(proc.stdout)


def test_printed_dumps_are_py_spys_trimmed(hung):
    proc, result, _ = hung
    for record in result["ranks"]:
        user_frame = f"    {record['function']} ({record['file']}:{record['line']})"
        assert user_frame in record["dump"].splitlines(), "the frame is py-spy's own line"
        assert f"$ py-spy dump --pid {record['pid']}    # rank {record['rank']}" in proc.stdout
        assert user_frame in proc.stdout.splitlines()
        assert f"Thread {record['pid']} (idle)" in proc.stdout
    assert "Python v" not in proc.stdout and sys.executable not in proc.stdout


def test_nothing_is_left_running(hung, fixed):
    for _, result, folder in (hung, fixed):
        running = set(result["pids"]) & set(processes_naming(SCRIPT.name))
        assert not running, f"ranks {sorted(running)} still running"
        assert list((folder / "tmp").iterdir()) == [], "the temporary folder outlived the run"


# ---------------------------------------------------------------------------------------------
# Teeth: no hang, no "stuck"; the numbers come from the processes
# ---------------------------------------------------------------------------------------------
def test_fixed_ranks_finish_and_are_not_stuck(fixed):
    proc, result, _ = fixed
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (result["state"], result["ranks"]) == ("finished", []), proc.stdout
    assert "not stuck: every rank finished" in proc.stdout
    assert "py-spy dump --pid" not in proc.stdout


def copy_with(tmp, old, new):
    """The script and the modules it imports in `tmp`, with `old` replaced by `new`."""
    for name in ("pace.py", "provenance.py"):
        shutil.copy(ROOT / "code" / name, tmp / name)
    source = SCRIPT.read_text()
    assert old in source
    (tmp / "debugging").mkdir()  # the layout of code/: the script finds pace one folder up
    (tmp / "debugging" / SCRIPT.name).write_text(source.replace(old, new, 1))
    return tmp / "debugging" / SCRIPT.name


def test_a_copy_without_the_bug_is_not_reported_stuck(tmp_path):
    copy = copy_with(tmp_path, "    if rank == 0:\n", "    if rank >= 0:  # every rank\n")
    proc, result = where_stuck(tmp_path, script=copy)
    assert proc.returncode == 1, (
        f"a hang run that did not hang must fail:\n{proc.stdout}{proc.stderr}"
    )
    assert result["state"] == "finished" and result["as_expected"] is False, proc.stdout


def test_shifted_lines_are_reported_shifted(tmp_path, hung):
    padding = "# three lines that move every line below them\n#\n#\n"
    copy = copy_with(
        tmp_path, "def log_on_rank0_then_barrier", padding + "def log_on_rank0_then_barrier"
    )
    proc, result = where_stuck(tmp_path, script=copy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_points_at_the_calls(result["ranks"], script=copy)
    moved = [r["line"] - h["line"] for r, h in zip(result["ranks"], hung[1]["ranks"], strict=True)]
    assert moved == [3, 3]


def test_missing_py_spy_is_one_line_and_status_2(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(pathlib.Path(sys.executable).resolve())  # no py-spy beside it
    proc = subprocess.run(
        [str(bare / "python"), str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=pace.limit(RUN_TIMEOUT),
        env={**os.environ, "PATH": str(bare)},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "error: py-spy not found: pip install py-spy"


# ---------------------------------------------------------------------------------------------
# The committed record
# ---------------------------------------------------------------------------------------------
def script_frames(stdout):
    return sorted(set(re.findall(rf"^    (\S+ \({re.escape(SCRIPT.name)}:\d+\))$", stdout, re.M)))


def test_recorded_run_matches_the_script(hung):
    """Where the build is not root the chapter shows this record: its lines must be today's."""
    record = json.loads(RECORDED.read_text())
    assert record["command"] == ["python", "code/debugging/where_stuck.py"]
    assert record["result"]["state"] == "stuck"
    assert_points_at_the_calls(record["result"]["ranks"])
    for rank in record["result"]["ranks"]:
        assert f"    {rank['function']} ({rank['file']}:{rank['line']})" in record["stdout"]
    assert_every_frame_is_in_its_function(record["stdout"])
    assert script_frames(record["stdout"]) == script_frames(hung[0].stdout), "record again"
