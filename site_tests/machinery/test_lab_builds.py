"""How the build runs a lab: a failing or hung lab fails the build with its own error, a run
leaves nothing behind, the cache reruns a lab only when its key changes; and the home page
lists every lab. Each test builds a small site of its own (site/test_site_build.py checks the
real one)."""

import importlib.util
import json
import pathlib
import re
import textwrap

import pytest

from site_tests.conftest import ROOT, alive, mkdocs_build, pace

HOOK = ROOT / "hooks" / "labs.py"

# ---------------------------------------------------------------------------------------------
# The hook's contract, on a throw-away site
# ---------------------------------------------------------------------------------------------
DEMO_LAB = """\
import argparse, json, pathlib, subprocess, sys, tempfile, time
import helper

parser = argparse.ArgumentParser()
parser.add_argument("--runs-log")
parser.add_argument("--json")
parser.add_argument("--mode", default="ok")
args = parser.parse_args()
with open(args.runs_log, "a") as log:
    log.write("ran\\n")
# What a lab leaves in its temp dir (a rank's store), and a rank that outlives a kill of the lab
scratch = tempfile.mkdtemp(prefix="ddp-lab-")
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
rank = subprocess.Popen(sleep, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
pathlib.Path(args.runs_log).with_name("lab-tmp.json").write_text(
    json.dumps({"scratch": scratch, "rank": rank.pid})
)
if args.mode == "fail":
    sys.exit("demo lab: the collective check failed on rank 1")
if args.mode == "hang":
    time.sleep(60)
print(helper.GREETING)
pathlib.Path(args.json).write_text(json.dumps({"env": {}}))
"""


@pytest.fixture
def demo_site(tmp_path):
    """A one-page site whose single lab run logs each time it really runs."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "code").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Demo\n\n<!-- lab:demo:stdout -->\n")
    (tmp_path / "code" / "demo.py").write_text(DEMO_LAB)
    (tmp_path / "code" / "helper.py").write_text('GREETING = "hello from the demo lab"\n')
    runs_log = tmp_path / "runs.log"

    def configure(mode="ok", timeout=20):
        (tmp_path / "mkdocs.yml").write_text(
            textwrap.dedent(f"""\
            site_name: Demo
            hooks: [{HOOK}]
            extra:
              lab_runs:
                demo:
                  script: code/demo.py
                  args: [--runs-log, {runs_log}, --mode, {mode}]
                  timeout: {timeout}
            """)
        )

    def build():
        return mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site", tmp_path / "cache", 60)

    def runs():
        return runs_log.read_text().splitlines().count("ran") if runs_log.exists() else 0

    configure()
    return tmp_path, configure, build, runs


def test_a_failing_lab_fails_the_build_with_its_own_error(demo_site):
    _, configure, build, _ = demo_site
    configure(mode="fail")
    proc = build()
    assert proc.returncode != 0
    assert "the collective check failed on rank 1" in proc.stderr
    assert "exited with status 1" in proc.stderr


def test_a_hung_lab_fails_the_build_at_its_timeout(demo_site, monkeypatch):
    _, configure, build, _ = demo_site
    configure(mode="hang", timeout=2)
    monkeypatch.setenv(pace.ENV, str(2 * pace.REFERENCE_IMPORT_S))  # a machine twice as slow
    proc = build()
    assert proc.returncode != 0
    assert "timed out after 4 s (its 2 s at this machine's pace)" in proc.stderr


@pytest.mark.parametrize("mode", ["ok", "fail", "hang"])
def test_a_lab_leaves_no_temp_dir_and_no_rank_however_it_ends(demo_site, mode):
    """The runner owns the lab's TMPDIR: after a pass, a failure or a kill at the timeout, the
    `ddp-lab-*` directory the lab made there is gone, and so is the rank it started."""
    folder, configure, build, _ = demo_site
    configure(mode=mode, timeout=4)
    build()
    left = json.loads((folder / "lab-tmp.json").read_text())
    scratch = pathlib.Path(left["scratch"])
    assert scratch.parent.name.startswith("lab-demo-"), f"TMPDIR was not the runner's: {scratch}"
    assert not scratch.parent.exists(), f"{mode}: left {scratch.parent}"
    assert not alive(left["rank"]), f"{mode}: rank {left['rank']} outlived the run"


def test_cache_reruns_a_lab_only_when_its_key_changes(demo_site):
    folder, configure, build, runs = demo_site
    assert build().returncode == 0 and runs() == 1
    page = folder / "site" / "index.html"
    assert "hello from the demo lab" in page.read_text()

    (folder / "docs" / "index.md").write_text("# Demo, edited\n\n<!-- lab:demo:stdout -->\n")
    assert build().returncode == 0 and runs() == 1, "a Markdown edit must not rerun the lab"
    assert "Demo, edited" in page.read_text()

    (folder / "code" / "helper.py").write_text('GREETING = "hello again"\n')
    assert build().returncode == 0 and runs() == 2, "an imported module changed: rerun"
    assert "hello again" in page.read_text()

    (folder / "code" / "demo.py").write_text(DEMO_LAB + "\n# a comment is a change too\n")
    assert build().returncode == 0 and runs() == 3, "the script changed: rerun"

    configure(timeout=30)  # the timeout is not part of what the lab computes
    assert build().returncode == 0 and runs() == 3
    configure(mode="other")
    assert build().returncode == 0 and runs() == 4, "the arguments changed: rerun"


def test_the_cache_key_covers_the_torch_version(demo_site, monkeypatch):
    folder, _, _, _ = demo_site
    spec = importlib.util.spec_from_file_location("labrunner", ROOT / "hooks" / "labrunner.py")
    labrunner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(labrunner)
    run = labrunner.LabRun("demo", {"script": "code/demo.py", "args": ["--mode", "ok"]}, folder)
    assert [p.name for p in run.sources] == ["demo.py", "helper.py"]
    key = run.cache_key()
    monkeypatch.setattr(labrunner, "installed_torch", lambda: "2.99.0")
    assert run.cache_key() != key


def test_an_unknown_marker_fails_the_build(demo_site):
    folder, _, build, _ = demo_site
    (folder / "docs" / "index.md").write_text("# Demo\n\n<!-- lab:nosuchrun:stdout -->\n")
    proc = build()
    assert proc.returncode != 0 and "unknown lab run 'nosuchrun'" in proc.stderr


# ---------------------------------------------------------------------------------------------
# The home page lists every lab
# ---------------------------------------------------------------------------------------------
def nav_labs(config_text):
    """The pages of mkdocs.yml's `Labs:` section of the navigation."""
    section = re.search(r"^  - Labs:\n((?:      - .*\n)+)", config_text, re.MULTILINE)
    return re.findall(r": (\S+)$", section[1], re.MULTILINE)


def labs_missing_from(home, labs):
    linked = set(re.findall(r"\]\(([^)#\s]+)", home))
    return [lab for lab in labs if lab not in linked]


def test_the_home_page_links_every_lab():
    labs = nav_labs((ROOT / "mkdocs.yml").read_text())
    assert "labs/slurm.md" in labs and len(labs) >= 6, labs
    assert labs_missing_from((ROOT / "docs" / "index.md").read_text(), labs) == []


def test_a_lab_missing_from_the_home_page_is_reported():
    home = "Labs: [gloo](labs/ddp-gloo.md) and [two nodes](labs/two-nodes.md#top)."
    labs = ["labs/ddp-gloo.md", "labs/two-nodes.md", "labs/slurm.md"]
    assert labs_missing_from(home, labs) == ["labs/slurm.md"]
