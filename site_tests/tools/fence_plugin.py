"""pytest plugin: how the site's Markdown code fences become tests.

pytest-markdown-docs does the running; this plugin closes the gaps that would let a fence pass
without running:
- fences inside Material admonitions (`!!!`, `???`, `???+`) are collected, by the parser the
  build finds its fences with (hooks/fence_parser.py), so the tests run what the build runs;
- a python fence inside a content tab (`===`) is a collection error, because the collector
  cannot see it and it would silently never run;
- a fence whose body sits under `if __name__ == "__main__":` is a collection error, because
  fences do not run as __main__ and the body would be skipped silently;
- a fence whose first line is `# fence: skip (REASON)` is reported as skipped with that reason.

- a test that needs the built site outside site_tests/site/ is a collection error: the folders
  decide which half of `nox -s tests` runs a test, and the release matrix leaves site/ out.

Two switches serve the release matrix's catch-rate measure (site_tests/tools/catch_rate.py):
- PRETEND_TORCH=2.15.0 makes `torch.__version__` read 2.15.0 inside every fence, and
  `expected_release()` return it to the lab tests, while the installed torch keeps running: the
  checks then hold an older release to the newer one's expectations, as if no note knew of it;
- CHECK_REPORT=PATH writes every test's outcome (and a fence's code) to PATH as JSON.
"""

import json
import os
import pathlib
import re

import pytest

from hooks import fence_parser
from hooks.fencerunner import skip_reason

MAIN_GUARD = re.compile(r"^\s*if\s+__name__\s*==\s*['\"]__main__['\"]\s*:", re.MULTILINE)


@pytest.hookimpl(tryfirst=True)
def pytest_markdown_docs_markdown_it():
    return fence_parser.parser()


class HiddenFence(pytest.File):
    """Stands in for a Markdown file that hides a python fence where it cannot be collected."""

    def collect(self):
        raise self.CollectError(self.config.stash[HIDDEN][self.path])


HIDDEN = pytest.StashKey[dict]()


def pytest_collect_file(file_path, parent):
    """Refuse Markdown that hides a python fence in a content tab."""
    if not (parent.config.option.markdowndocs and file_path.suffix == ".md"):
        return None
    hidden = fence_parser.hidden_fences(file_path.read_text(encoding="utf-8"))
    if not hidden:
        return None
    parent.config.stash.setdefault(HIDDEN, {})[file_path] = (
        f"{file_path}:{hidden[0]}: a python fence inside a content tab is never collected; "
        "move it out of the tab"
    )
    return HiddenFence.from_parent(parent, path=file_path)


# The fixtures that build the site: test_browser.py's site_build is built_site, unless a person
# points it at a site already built ($SITE_DIR).
SITE_FIXTURES = {"built_site", "site_build"}
# The folder that holds every test needing them: `nox -s tests` runs it beside the others, and
# the release matrix leaves it out.
SITE_FOLDER = "site"


def needs_site(item):
    return not SITE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config, items):
    misplaced = [
        item.nodeid for item in items if needs_site(item) and item.path.parent.name != SITE_FOLDER
    ]
    if misplaced:
        raise pytest.UsageError(
            f"{misplaced[0]} needs the built site: move it to site_tests/{SITE_FOLDER}/, the half "
            f"of the suite that builds it ({len(misplaced)} such test(s))"
        )
    for item in items:
        code = getattr(item, "code", None)
        if code is None:
            continue
        if MAIN_GUARD.search(code):
            raise pytest.UsageError(
                f"{item.nodeid}: a fence body under `if __name__ == '__main__':` never runs "
                "under pytest-markdown-docs; put it at top level"
            )
        if reason := skip_reason(code):
            item.add_marker(pytest.mark.skip(reason=reason))


# ---------------------------------------------------------------------------------------------
# The release whose expectations apply, and a report of outcomes (for tools/catch_rate.py)
# ---------------------------------------------------------------------------------------------
def expected_release():
    """The torch release the checks expect: PRETEND_TORCH if set, else the installed one."""
    import torch
    from torch.torch_version import TorchVersion

    return TorchVersion(os.environ.get("PRETEND_TORCH") or torch.__version__)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Inside a fence, `torch.__version__` is the expected release (PRETEND_TORCH)."""
    if not (os.environ.get("PRETEND_TORCH") and getattr(item, "code", None) is not None):
        return (yield)
    import torch

    real = torch.__version__
    torch.__version__ = expected_release()
    try:
        return (yield)
    finally:
        torch.__version__ = real


REPORT = {}  # nodeid -> {outcome, message, code}, when CHECK_REPORT is set


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if os.environ.get("CHECK_REPORT"):
        entry = REPORT.setdefault(
            item.nodeid, {"outcome": "passed", "message": "", "code": getattr(item, "code", None)}
        )
        if entry["outcome"] == "passed" and not report.passed:
            entry["outcome"] = report.outcome  # the first phase that did not pass decides
            entry["message"] = (str(report.longrepr).strip().splitlines() or [""])[-1]
    return report


def pytest_sessionfinish(session):
    path = os.environ.get("CHECK_REPORT")
    if path:
        pathlib.Path(path).write_text(json.dumps(REPORT, indent=1))
