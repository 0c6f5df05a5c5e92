"""Grade the exercises: run their tests, print a scoreboard and every failing check of each.

    python grade.py                  every exercise in this folder
    python grade.py ex3              one exercise (ex3, 3 or ex3_bucketed_ddp)
    python grade.py --solutions      the solutions/ folder instead of your files

It needs only torch and pytest. The exit status is 0 when every graded exercise is solved.
Each failing check gets one line, in the order the tests run: each test file checks the
building blocks before what is built from them, so the first line is the likeliest cause.
For the whole story of a failure, run that exercise's tests with pytest, as its file says.
"""

import argparse
import ast
import json
import os
import pathlib
import re
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
# A failure's first line names its exception type; for a failed check the words are enough.
PLAIN = re.compile(r"^(?:[\w.]+\.)?(?:AssertionError|RankFailed): ")


def exercises():
    """{number: starter path}, from the exN_*.py files beside this script."""
    found = {}
    for path in sorted(HERE.glob("ex[0-9]*_*.py")):
        found[int(re.match(r"ex(\d+)_", path.name).group(1))] = path
    return found


def title(path):
    """'ring all-reduce by hand', from 'Exercise 1: ring all-reduce by hand.'

    The learner's file may hold anything (no docstring, a syntax error, bytes that are not
    UTF-8): then the title is the file's name, and its tests say what is wrong.
    """
    try:
        docstring = ast.get_docstring(ast.parse(path.read_bytes())) or ""
    except (OSError, SyntaxError, ValueError):
        docstring = ""
    first = docstring.strip().splitlines()[0] if docstring.strip() else ""
    words = first.split(":", 1)[1].strip().rstrip(".") if ":" in first else ""
    return words or path.stem


def choose(names, known):
    if not names:
        return sorted(known)
    chosen = []
    for name in names:
        match = re.fullmatch(r"(?:test_)?(?:ex)?(\d+)(?:_\w*)?(?:\.py)?", name)
        if not match or int(match.group(1)) not in known:
            raise SystemExit(f"no exercise {name!r}; there are {', '.join(map(str, known))}")
        chosen.append(int(match.group(1)))
    return chosen


class Scores:
    """A pytest plugin that keeps, per test file, its outcomes, time and failures."""

    def __init__(self):
        self.files = {}

    def entry(self, report):
        name = pathlib.PurePath(report.nodeid.split("::")[0]).name
        return self.files.setdefault(name, blank())

    def pytest_runtest_logreport(self, report):
        entry = self.entry(report)
        entry["s"] += report.duration
        if report.when == "call" and report.passed:
            entry["passed"] += 1
        if report.failed:
            entry["failed"].append(report.nodeid.split("::", 1)[-1])
            note(entry, first_line(report))

    def pytest_collectreport(self, report):
        if report.failed:
            note(self.entry(report), first_line(report))


def blank():
    return {"passed": 0, "failures": [], "failed": [], "s": 0.0}


def note(entry, line):
    """Keep a failure's line once: a module fixture that fails, fails each test that uses it
    with the same words."""
    if line not in entry["failures"]:
        entry["failures"].append(line)


def first_line(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return PLAIN.sub("", text.strip().splitlines()[0]) if text.strip() else "failed"


def grade(numbers, known):
    """Run the chosen exercises' tests in one pytest process; return one row per exercise."""
    tests = {n: HERE / f"test_{known[n].name}" for n in numbers}
    scores = Scores()
    pytest.main(
        [
            "-q",
            "--tb=no",
            "-rN",
            "--no-header",
            "-p",
            "no:cacheprovider",
            *map(str, tests.values()),
        ],
        plugins=[scores],
    )
    rows = []
    for number in numbers:
        entry = scores.files.get(tests[number].name, blank())
        solved = not entry["failures"] and entry["passed"] > 0
        failures = [] if solved else entry["failures"] or ["no tests ran"]
        rows.append(
            {
                "exercise": number,
                "title": title(known[number]),
                "solved": solved,
                "first_failure": failures[0] if failures else None,
                "failures": failures,
                "failed_tests": entry["failed"],
                "seconds": round(entry["s"], 2),
            }
        )
    return rows


def scoreboard(rows):
    lines = [""]
    for row in rows:
        verdict = "solved" if row["solved"] else "not yet"
        lines.append(f"exercise {row['exercise']}  {row['title']:<32} {verdict}")
        # The likeliest cause first; what follows is often its echo in a later check.
        lines += [f"    {failure}" for failure in row["failures"][:1]]
        lines += [f"    also: {failure}" for failure in row["failures"][1:]]
    solved = sum(row["solved"] for row in rows)
    lines.append(f"\n{solved} of {len(rows)} solved")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="exercises to grade (default: all)")
    parser.add_argument("--solutions", action="store_true", help="grade solutions/ instead")
    parser.add_argument("--json", metavar="PATH", help="also write the scoreboard here")
    args = parser.parse_args(argv)
    known = exercises()
    numbers = choose(args.names, known)
    if args.solutions:
        os.environ["EXERCISES_FROM"] = str(HERE / "solutions")
    started = time.perf_counter()
    rows = grade(numbers, known)
    print(scoreboard(rows))
    if args.json:
        result = {"rows": rows, "wall_s": round(time.perf_counter() - started, 2)}
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if all(row["solved"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
