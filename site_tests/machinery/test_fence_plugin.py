"""The fence collector (site_tests/tools/fence_plugin.py) closes the gaps that let a fence pass
unrun.

Each test writes a small Markdown file and runs pytest on it in a subprocess, exactly as
`nox -s fences` does, then reads pytest's summary line.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from site_tests.conftest import ROOT, pace


def run_fences(tmp_path, markdown, **env):
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(markdown))
    environ = {k: v for k, v in os.environ.items() if k not in ("PRETEND_TORCH", "CHECK_REPORT")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            "pyproject.toml",
            "--markdown-docs",
            "-q",
            str(page),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
        env=environ | env,
    )


def summary(proc):
    """pytest's closing counts, e.g. {"passed": 1, "failed": 1}."""
    found = re.findall(r"(\d+) (passed|failed|skipped|error)", proc.stdout)
    return {word: int(count) for count, word in found}


def test_a_fence_inside_an_admonition_runs(tmp_path):
    proc = run_fences(
        tmp_path,
        """\
        # Page

        !!! note "Inside"

            ```python
            raise AssertionError("the admonition's fence ran")
            ```

        ??? info "Collapsed"

            ```python
            assert 2 + 2 == 4
            ```
        """,
    )
    assert summary(proc) == {"failed": 1, "passed": 1}, proc.stdout
    assert "the admonition's fence ran" in proc.stdout


def test_blank_lines_inside_a_folded_fence_do_not_cut_it_short(tmp_path):
    """Two blank lines (ruff's spacing between functions) must not end the fence early."""
    proc = run_fences(
        tmp_path,
        """\
        # Page

        ??? note "How we know"

            ```python
            import math


            def half(x):
                return x / 2


            assert half(math.pi) == 1.0, "the end of the fence ran"
            ```
        """,
    )
    assert summary(proc) == {"failed": 1}, proc.stdout
    assert "the end of the fence ran" in proc.stdout


def test_a_skip_line_skips_with_its_reason(tmp_path):
    proc = run_fences(
        tmp_path,
        """\
        ```python
        # fence: skip (needs two GPUs)
        raise AssertionError("must not run")
        ```
        """,
    )
    assert summary(proc) == {"skipped": 1}, proc.stdout
    assert "needs two GPUs" in proc.stdout


@pytest.mark.parametrize(
    "markdown, message",
    [
        (
            """\
            === "CPU"

                ```python
                assert False
                ```
            """,
            "a python fence inside a content tab is never collected",
        ),
        (
            """\
            ```python
            if __name__ == "__main__":
                assert False
            ```
            """,
            "never runs under pytest-markdown-docs",
        ),
    ],
    ids=["content tab", "main guard"],
)
def test_a_fence_that_would_never_run_is_an_error(tmp_path, markdown, message):
    proc = run_fences(tmp_path, markdown)
    assert proc.returncode not in (0, 5), proc.stdout
    assert message in proc.stdout + proc.stderr


VERSION_KEYED = """\
```python
import torch

assert torch.__version__ == "9.9.0", f"the fence sees {torch.__version__}"
```

```python
assert 2 + 2 == 4
```
"""


def test_pretend_torch_sets_the_version_a_fence_sees(tmp_path):
    """PRETEND_TORCH (the catch-rate switch) reaches the fence; without it, the real version."""
    assert summary(run_fences(tmp_path, VERSION_KEYED)) == {"failed": 1, "passed": 1}
    pretending = run_fences(tmp_path, VERSION_KEYED, PRETEND_TORCH="9.9.0")
    assert summary(pretending) == {"passed": 2}, pretending.stdout


def test_check_report_records_each_outcome_with_its_fence(tmp_path):
    report = tmp_path / "report.json"
    run_fences(tmp_path, VERSION_KEYED, CHECK_REPORT=str(report))
    outcomes = json.loads(report.read_text())
    by_outcome = {entry["outcome"]: entry for entry in outcomes.values()}
    assert set(by_outcome) == {"failed", "passed"}, outcomes
    assert "9.9.0" in by_outcome["failed"]["code"]
    assert "the fence sees" in by_outcome["failed"]["message"]


MIXED = """\
import pytest

@pytest.fixture
def built_site():
    return "site"

def test_needs_the_site(built_site):
    pass

def test_a_lab():
    pass
"""


@pytest.mark.parametrize("folder, error", [("site", False), ("labs", True)])
def test_a_test_that_needs_the_site_must_live_in_site(tmp_path, folder, error):
    """The folders split `nox -s tests` in two halves: a site test elsewhere is refused."""
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "test_mixed.py").write_text(MIXED)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "pyproject.toml", "-v"]
        + [str(tmp_path / folder / "test_mixed.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
    )
    ran = re.findall(r"::(test_\w+) PASSED", proc.stdout)
    if error:
        assert proc.returncode == 4, proc.stdout + proc.stderr
        assert (
            "test_needs_the_site needs the built site: move it to site_tests/site/" in proc.stderr
        )
    else:
        assert sorted(ran) == ["test_a_lab", "test_needs_the_site"], proc.stdout
