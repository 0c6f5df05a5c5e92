"""Run Markdown fences the way the fence tests do, and record what each one printed.

    python hooks/fencerunner.py JOBS.json RESULTS.json

JOBS is a list of {"id", "code"}; RESULTS becomes a list of {"id", "stdout", "error"}, where
error is None or the fence's traceback. Each fence runs in a namespace of its own, as
pytest-markdown-docs runs it (not as __main__), one after another in this one process, so that
torch is imported once per page. Only the standard library is used: the build starts this with
the site's Python, which is also the Python the fences are tested with.
"""

import contextlib
import io
import json
import re
import sys
import traceback

# The interpreter flags every fence runs under, at build time and in the tests: a deprecated
# torch API on a page fails it, instead of rotting quietly, and so does a file or socket a
# fence opens and never closes (a reader copies the leak along with the code).
WARNINGS_AS_ERRORS = [
    "-W",
    "error::FutureWarning",
    "-W",
    "error::DeprecationWarning",
    "-W",
    "error::ResourceWarning",
]

# A fence whose first line is `# fence: skip (REASON)` is shown but never run, here or by the
# fence tests (site_tests/tools/fence_plugin.py uses this rule too).
SKIP_LINE = re.compile(r"#\s*fence:\s*skip\s*\((?P<reason>[^)]+)\)")


def skip_reason(code):
    """The reason a fence gives for not running, or None if it runs."""
    first = code.lstrip("\n").splitlines()[0] if code.strip() else ""
    skip = SKIP_LINE.match(first.strip())
    return skip["reason"] if skip else None


def run_fence(code, name):
    """Execute one fence; return (what it printed, its traceback or None)."""
    printed = io.StringIO()
    # A ResourceWarning raised while a leaked file is freed cannot propagate: Python hands
    # it to sys.unraisablehook and carries on. pytest fails the test on it, so we do too.
    unraisable, previous_hook = [], sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, name, "exec"), {"__name__": "__fence__"})
    except BaseException:  # a fence that calls sys.exit() has failed too
        return printed.getvalue(), traceback.format_exc(limit=-8)
    finally:
        sys.unraisablehook = previous_hook
    if unraisable:
        first = unraisable[0].exc_value
        return printed.getvalue(), f"{type(first).__name__}: {first}"
    return printed.getvalue(), None


def main(jobs_path, results_path):
    with open(jobs_path, encoding="utf-8") as jobs_file:
        jobs = json.load(jobs_file)
    results = []
    for job in jobs:
        stdout, error = run_fence(job["code"], job["id"])
        results.append({"id": job["id"], "stdout": stdout, "error": error})
    with open(results_path, "w", encoding="utf-8") as results_file:
        json.dump(results, results_file)


if __name__ == "__main__":
    main(*sys.argv[1:])
