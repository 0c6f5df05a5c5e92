"""code/pace.py: one measurement of the machine, and the limits derived from it."""

import os
import subprocess
import sys

import pytest

from site_tests.conftest import ROOT, pace

CODE = ROOT / "code"


def python(code, **env):
    """Run `code` with code/ importable and pace's variable as given (None: unset)."""
    environ = {k: v for k, v in os.environ.items() if k != pace.ENV}
    environ.update({k: v for k, v in env.items() if v is not None})
    environ["PYTHONPATH"] = os.pathsep.join([str(CODE), str(CODE / "failures")])
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("import_s", "factor"),
    [
        (1.0, 1.0),
        (pace.REFERENCE_IMPORT_S, 1.0),
        (3 * pace.REFERENCE_IMPORT_S, 3.0),
        (1000.0, pace.MAX_FACTOR),
    ],
)
def test_limits_stretch_with_the_measured_import_and_never_shrink(monkeypatch, import_s, factor):
    monkeypatch.setenv(pace.ENV, str(import_s))
    assert pace.factor() == factor
    assert pace.limit(15) == 15 * factor


def test_a_run_measures_once_and_its_children_inherit_the_number():
    code = (
        "import os, subprocess, sys, pace\n"
        "first = pace.import_seconds()\n"
        "child = 'import pace, os; print(pace.import_seconds() == float(os.environ[pace.ENV]))'\n"
        "print(first > 0, os.environ[pace.ENV] == f'{first:.2f}')\n"
        "done = subprocess.run([sys.executable, '-c', child], capture_output=True, text=True)\n"
        "print(done.stdout)"
    )
    assert python(code, **{pace.ENV: None}).split() == ["True", "True", "True"]


def test_runs_side_by_side_share_one_measurement_times_their_number(monkeypatch):
    monkeypatch.setenv(pace.ENV, "1.50")  # measured already: no interpreter is started
    assert pace.side_by_side(2, "/no/such/python") == {pace.ENV: "3.00"}
    monkeypatch.delenv(pace.ENV)
    (counted,) = pace.side_by_side(3, sys.executable).values()
    assert float(counted) >= 3 * 0.1, "three times a fresh import torch"
    assert pace.ENV not in os.environ, "this run's own pace is left alone"


def test_a_failure_scripts_default_deadline_follows_the_pace():
    code = (
        "import sys, harness\n"
        "sys.argv = ['case']\n"
        "print(harness.parse_args('a case', deadline_s=10, hangs=False).deadline_s)"
    )
    slower = python(code, **{pace.ENV: str(3 * pace.REFERENCE_IMPORT_S)})
    assert float(slower) == 30.0


@pytest.mark.skipif(os.geteuid() != 0, reason="the two-node lab checks for root first")
def test_the_two_node_labs_default_deadlines_follow_the_pace():
    code = (
        "import runpy\n"
        "lab = runpy.run_path('code/clusters/two_nodes.py')\n"
        "args = lab['parse_args']([])\n"
        "print(args.deadline, args.join_timeout)"
    )
    deadline, join = python(code, **{pace.ENV: str(2 * pace.REFERENCE_IMPORT_S)}).split()
    assert (float(deadline), float(join)) == (300.0, 180.0)
