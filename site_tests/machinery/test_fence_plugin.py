"""The fence collector (site_tests/tools/fence_plugin.py) closes the gaps that let a fence pass
unrun.

Each test writes a small Markdown file and runs pytest on it in a subprocess, exactly as
`nox -s fences` does, then reads pytest's summary line. The last tests check that the build
(hooks/fences.py) runs exactly the fences the collector collects, on every page.
"""

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
from mkdocs.utils.meta import get_data

from hooks import fence_parser
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


# ---------------------------------------------------------------------------------------------
# The build runs the fences the tests collect, no more and no fewer, on every page
# ---------------------------------------------------------------------------------------------
COLLECTED = re.compile(r"^(?P<path>\S+)::\[CodeFence#\d+\]\[line:(?P<line>\d+)\]$", re.M)


def fences_hook():
    spec = importlib.util.spec_from_file_location("fences_hook", ROOT / "hooks" / "fences.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def collected_fences(*pages):
    """{page: the lines of the fences pytest-markdown-docs collects there}, as `nox -s fences`
    collects them. `--rootdir=/` names every page by its whole path, a temporary one too."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "pyproject.toml", "--rootdir=/"]
        + ["--collect-only", "-q", "--markdown-docs", *map(str, pages)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {page.resolve(): [] for page in pages}
    for match in COLLECTED.finditer(proc.stdout):
        found[pathlib.Path("/", match["path"])].append(int(match["line"]))
    return found


def built_fences(hook, page):
    """The lines of the fences the build runs on `page`, numbered as the collector numbers them.

    MkDocs hands the hook the page without its front matter; the collector reads it whole.
    """
    text = page.read_text(encoding="utf-8")
    markdown, _ = get_data(text)
    offset = text[: len(text) - len(markdown)].count("\n")
    return [offset + fence.line for fence in hook.python_fences(markdown.split("\n"))]


def test_the_build_runs_the_fences_the_tests_collect_on_every_page():
    hook, pages = fences_hook(), sorted((ROOT / "docs").rglob("*.md"))
    collected = collected_fences(*pages)
    assert sum(map(len, collected.values())) > 0, "no fence collected at all"
    differ = {
        str(page.relative_to(ROOT)): {"built": built, "collected": collected[page.resolve()]}
        for page in pages
        if (built := built_fences(hook, page)) != collected[page.resolve()]
    }
    assert not differ, f"the build and the tests see different fences (by line): {differ}"


FOLDED = """\
---
title: A page with front matter
---
# Page

??? note "How we know"

    ```python
    assert True
    ```

```python
x = 1
```
"""


def test_a_fence_the_build_would_miss_is_caught(tmp_path, monkeypatch):
    """Read without the admonition plugin, the build would skip the fold's fence: it differs."""
    page = tmp_path / "page.md"
    page.write_text(FOLDED)
    hook = fences_hook()
    collected = collected_fences(page)[page.resolve()]
    assert built_fences(hook, page) == collected == [8, 12]
    monkeypatch.setattr(hook, "PARSER", fence_parser.AdmonitionMarkdownIt("commonmark"))
    assert built_fences(hook, page) == [12] != collected
