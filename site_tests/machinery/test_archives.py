"""hooks/archives.py: declared files zipped into site/downloads/, and the link a marker becomes.

The hook is tested on tiny throw-away sites (about a second a build). The last tests unpack
the real exercises download, as mkdocs.yml declares it, into a folder of its own and run it as
a learner would, with a plain `python -m pytest` (test_exercises.py grades the same download
with `python grade.py`).
"""

import ast
import os
import re
import sys
import zipfile

import pytest
import yaml

from site_tests.conftest import ARCHIVES_HOOK, ROOT, mkdocs_build, run_unpacked


def scratch_site(tmp_path, archives, page="<!-- archive:demo -->\n"):
    """A one-page site using the hook, with a small project to zip beside it."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(f"# Home\n\nGet it: \n\n{page}")
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "a.py").write_text("print('a')\n")
    (project / "b.py").write_text("print('b')\n")
    (project / "sub" / "c.txt").write_text("c\n" * 2000)
    (project / "notes.md").write_text("# Read me\n")
    config = {
        "site_name": "scratch",
        "strict": True,
        "hooks": [str(ARCHIVES_HOOK)],
        "extra": {"archives": archives},
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return tmp_path / "mkdocs.yml"


DEMO = {
    "demo": {
        "base": "project",
        "paths": ["project/*.py", "project/sub/*"],
        "readme": "project/notes.md",
    }
}


def build(config):
    site = config.parent / "site"
    proc = mkdocs_build(config, site, config.parent / "cache", timeout=120)
    return proc, site


def test_the_zip_holds_the_declared_files_under_one_folder(tmp_path):
    proc, site = build(scratch_site(tmp_path, DEMO))
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(site / "downloads" / "demo.zip") as archive:
        assert sorted(archive.namelist()) == [
            "demo/README.md",
            "demo/a.py",
            "demo/b.py",
            "demo/sub/c.txt",
        ]
        assert archive.read("demo/README.md") == b"# Read me\n"
        assert archive.read("demo/sub/c.txt") == b"c\n" * 2000


def test_the_marker_becomes_a_link_with_the_count_and_size(tmp_path):
    proc, site = build(scratch_site(tmp_path, DEMO))
    assert proc.returncode == 0, proc.stderr
    page = (site / "index.html").read_text()
    size = (site / "downloads" / "demo.zip").stat().st_size
    link = re.search(r'<a [^>]*href="(?P<href>[^"]+)"[^>]*download>(?P<text>[^<]+)</a>', page)
    assert link, "no download link on the page"
    assert link["href"] == "downloads/demo.zip"
    assert link["text"] == f"Download demo.zip (4 files, {max(1, round(size / 1024))} KB)"
    assert "archive:demo" not in page


def date_files(folder, seconds):
    """Give every file under `folder` the modification time `seconds` (since the epoch)."""
    for path in folder.rglob("*"):
        os.utime(path, (seconds, seconds))


def test_the_same_files_make_the_same_bytes(tmp_path):
    """Two copies of the project, written a day apart: a zip stores times in 2 s steps, and two
    copies written in one step would agree even if the hook kept each file's time."""
    zips = []
    for day, folder in enumerate((tmp_path / "one", tmp_path / "two")):
        folder.mkdir()
        config = scratch_site(folder, DEMO)
        date_files(folder / "project", 1_000_000_000 + day * 86_400)
        proc, site = build(config)
        assert proc.returncode == 0, proc.stderr
        zips.append((site / "downloads" / "demo.zip").read_bytes())
    assert zips[0] == zips[1]


@pytest.mark.parametrize(
    ("archives", "page", "error"),
    [
        (DEMO, "<!-- archive:other -->\n", "marker names unknown archive 'other'"),
        (
            {"demo": {**DEMO["demo"], "paths": ["project/*.py", "project/missing.py"]}},
            "",
            "'project/missing.py' matches no file",
        ),
        ({"demo": {**DEMO["demo"], "readme": "project/NO.md"}}, "", "no README"),
        ({"demo": {**DEMO["demo"], "base": "project/sub"}}, "", "is outside project/sub"),
        ({"demo": {"paths": ["project/*.py"]}}, "", "needs exactly the keys"),
    ],
    ids=["unknown-name", "missing-path", "missing-readme", "outside-base", "missing-keys"],
)
def test_a_bad_declaration_or_marker_fails_the_build(tmp_path, archives, page, error):
    proc, _ = build(scratch_site(tmp_path, archives, page))
    assert proc.returncode != 0
    assert error in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# The real download: the exercises, as a learner unpacks and runs them
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unpacked(exercises_download):
    return exercises_download


def learner_run(folder, *command):
    """Run a command in the unpacked folder with nothing of the course's setup around it."""
    # exercise 8's tests alone start three torchrun jobs
    return run_unpacked(folder, *command, timeout=420, hide=("EXERCISES_FROM", "PYTHONPATH"))


def test_the_download_holds_starters_tests_and_readme_but_no_solutions(unpacked):
    names = {path.name for path in unpacked.rglob("*") if path.is_file()}
    starters = {path.name for path in (ROOT / "exercises").glob("ex[0-9]*_*.py")}
    assert len(starters) == 9
    assert starters | {f"test_{name}" for name in starters} <= names
    assert {"README.md", "ranks.py", "grade.py", "pytest.ini"} <= names
    assert not (unpacked / "solutions").exists()
    readme = (unpacked / "README.md").read_text()
    assert "pip install torch pytest" in readme and "python grade.py" in readme


def test_plain_pytest_in_the_download_fails_each_starter_for_its_reason(unpacked):
    proc = learner_run(unpacked, "-m", "pytest", "-q", "--tb=line")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for number in range(1, 7):  # exercise 4 reports exercise 3's gap: it builds on it
        wanted = 3 if number == 4 else number
        assert f"NotImplementedError: exercise {wanted}:" in proc.stdout
    assert "in exercise 7's script" in proc.stdout  # the script's own bug: it hangs
    assert "never wrapped its model in DistributedDataParallel" in proc.stdout  # exercise 8
    assert "NotImplementedError: exercise 9:" in proc.stdout
    assert not list(unpacked.rglob(".pytest_cache"))


def test_the_readme_commands_are_the_ones_that_work(unpacked):
    readme = (unpacked / "README.md").read_text()
    commands = re.findall(r"^python (\S+\.py)", readme, re.MULTILINE)
    assert commands and all((unpacked / script).is_file() for script in commands)
    assert readme.count("```bash") == 2  # set up; grade


def test_the_download_imports_nothing_but_torch_pytest_and_the_standard_library(unpacked):
    local = {path.stem for path in unpacked.glob("*.py")}
    allowed = set(sys.stdlib_module_names) | {"torch", "pytest"} | local
    for path in unpacked.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
