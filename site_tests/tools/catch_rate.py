"""How many known release differences the checks catch, when no note knows of the release.

Run it with an older torch's interpreter (`nox -s catch-rate` uses 2.13.0's venv):

    python site_tests/tools/catch_rate.py --pretend 2.15.0              # fences and lab tests
    python site_tests/tools/catch_rate.py --pretend 2.15.0 --fences-only

Every fence and every lab test runs with PRETEND_TORCH set (see fence_plugin.py): inside a
fence `torch.__version__` reads the pretended release, and the lab tests' expected_release()
returns it, so each version-keyed expectation takes the newer release's branch while the older
torch really runs. A known difference (site_tests/tools/known_differences.toml) is caught when
one of its checks fails. A failure that no known difference explains is a false alarm, and is
listed.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import noxfile  # noqa: E402  (the fence arguments and the lab tests, from their one home)

DIFFERENCES = ROOT / "site_tests" / "tools" / "known_differences.toml"


def run_checks(pretend, fences_only, scratch):
    """Run the fences (and the lab tests) under PRETEND_TORCH; return {nodeid: outcome}."""
    suites = {"fences": [*noxfile.FENCE_ARGS, "docs"]}
    if not fences_only:
        suites["labs"] = [*noxfile.NOT_TEETH, noxfile.LAB_TESTS]
    outcomes = {}
    for name, args in suites.items():
        report = pathlib.Path(scratch) / f"{name}.json"
        env = dict(os.environ, PRETEND_TORCH=pretend, CHECK_REPORT=str(report))
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            timeout=1500,
        )
        outcomes.update(json.loads(report.read_text()))
    return outcomes


def matches(check, nodeid, entry):
    kind, _, text = check.partition(":")
    if kind == "fence":
        return text in (entry.get("code") or "")
    if kind == "test":
        return nodeid.startswith(text)
    raise ValueError(f"{DIFFERENCES.name}: check {check!r} is neither fence: nor test:")


def tally(differences, outcomes):
    """Per difference, the failed checks that caught it; and the failures nothing explains."""
    failed = {nodeid: e for nodeid, e in outcomes.items() if e["outcome"] == "failed"}
    caught = {
        d["id"]: [n for n, e in failed.items() if any(matches(c, n, e) for c in d["checks"])]
        for d in differences
    }
    explained = {n for nodeids in caught.values() for n in nodeids}
    return caught, {n: failed[n]["message"] for n in failed if n not in explained}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretend", required=True, help="the release whose expectations apply")
    parser.add_argument("--fences-only", action="store_true", help="skip the lab tests")
    parser.add_argument("--json", metavar="PATH", help="also write the tally to PATH")
    args = parser.parse_args()
    import torch

    differences = tomllib.loads(DIFFERENCES.read_text())["difference"]
    with tempfile.TemporaryDirectory(prefix="catch-rate-") as scratch:
        outcomes = run_checks(args.pretend, args.fences_only, scratch)
    caught, alarms = tally(differences, outcomes)
    counted = [d for d in differences if d["page_text"]]
    hits = [d for d in counted if caught[d["id"]]]
    print(f"torch {torch.__version__} checked with {args.pretend}'s expectations")
    print(
        f"{len(outcomes)} checks, {sum(e['outcome'] == 'failed' for e in outcomes.values())} failed"
    )
    for d in differences:
        mark = "caught" if caught[d["id"]] else "MISSED" if d["page_text"] else "-"
        print(f"  {mark:7} {d['id']:36} since {d['since']}  {' '.join(caught[d['id']][:2])}")
    print(f"false alarms (failures no known difference explains): {len(alarms)}")
    for nodeid, message in alarms.items():
        print(f"  {nodeid}: {message}")
    print(f"catch rate: {len(hits)} of {len(counted)} differences that touch page text")
    if args.json:
        summary = {"caught": caught, "false_alarms": alarms, "hits": len(hits)}
        pathlib.Path(args.json).write_text(json.dumps(summary | {"counted": len(counted)}))


if __name__ == "__main__":
    main()
