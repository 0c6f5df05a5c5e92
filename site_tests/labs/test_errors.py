"""The error index (docs/errors/, code/errors/): its corpus, and the messages its entries show.

Every line of code/errors/corpus.yml was pasted by a person into a public thread; each has a
variant with that person's names, numbers, addresses and paths changed, which the browser test
pastes into the search as well (test_browser.py). Here the corpus is held to its shape, and the
messages to torch:

- a live entry's message is what code/errors/reproduce.py printed on this torch release, and
  must match the entry's `expect` (or its `releases` line for this release): a message torch
  rewords fails the release matrix on the release that rewords it;
- an entry another lab prints (chapter 5's stall) must be in that lab's output, on each release;
- a quoted entry's text must be in the files of the release it names, verbatim.
"""

import mmap
import pathlib
import re
import subprocess
import sys

import error_entries  # hooks/error_entries.py (conftest puts hooks/ on the path)
import pytest
import torch
from mkdocs.exceptions import PluginError

from site_tests.conftest import ROOT, pace

CORPUS = error_entries.load_corpus(ROOT)
RELEASE = torch.__version__.split("+")[0]
FAMILIES = {
    "launch", "stores", "devices", "nccl", "reducer", "compile", "checkpoints", "processes",
    "memory", "data",
}  # fmt: skip
THREADS = [(error_id, t) for error_id, entry in CORPUS.items() for t in entry["threads"]]


def test_the_corpus_is_fifty_real_lines_over_every_family():
    assert len(THREADS) >= 50, len(THREADS)
    per_family = {}
    for error_id, _ in THREADS:
        family = CORPUS[error_id]["family"]
        per_family[family] = per_family.get(family, 0) + 1
    assert set(per_family) == FAMILIES, per_family
    assert min(per_family.values()) >= 2, per_family
    addresses = [thread["url"] for _, thread in THREADS]
    assert all(re.fullmatch(r"https://\S+", url) for url in addresses), addresses
    assert len(set(addresses)) == len(addresses), "a thread counted twice"


@pytest.mark.parametrize(("error_id", "thread"), THREADS, ids=[t["url"] for _, t in THREADS])
def test_each_line_has_a_variant_with_other_user_parts(error_id, thread):
    pasted, variant = thread["pasted"], thread["variant"]
    for line in (pasted, variant):
        assert "\n" not in line and 20 <= len(line) <= 400, line
    assert variant != pasted
    assert thread["settled"].strip(), "what the thread settled on"


def test_each_live_message_is_what_its_entry_expects(lab_record):
    record = lab_record(error_entries.LIVE_RUN)
    messages = record["result"]["messages"]
    live = {error_id for error_id, entry in CORPUS.items() if entry["printed"] == "live"}
    assert set(messages) == live
    wrong = {
        error_id: messages[error_id]
        for error_id in live
        if not error_entries.expected(CORPUS[error_id], RELEASE).search(messages[error_id])
    }
    assert not wrong, f"torch {RELEASE} printed what the entries do not expect: {wrong}"


def test_each_message_another_lab_prints_is_in_its_output(lab_record):
    shown = {error_id: e for error_id, e in CORPUS.items() if e["printed"] == "lab"}
    missing = [i for i, e in shown.items() if not error_entries.lab_line(e, lab_record(e["run"]))]
    assert not missing, f"not in their labs' output on torch {RELEASE}: {missing}"


def site_packages():
    return pathlib.Path(torch.__file__).parent.parent


def test_each_quoted_message_is_in_the_release_it_names():
    quoted = {error_id: e for error_id, e in CORPUS.items() if e["printed"] == "quoted"}
    mine = {error_id: e for error_id, e in quoted.items() if e["release"] == RELEASE}
    if not mine:
        pytest.skip(f"no entry quotes torch {RELEASE}")
    missing = {}
    for error_id, entry in mine.items():
        pieces = entry.get("pieces", [entry["quoted"]])
        assert all(piece in entry["quoted"] for piece in pieces), error_id
        for piece in pieces:
            if not any(contains(site_packages() / path, piece) for path in entry["source"]):
                missing.setdefault(error_id, []).append(piece)
    assert not missing, f"not in torch {RELEASE}'s files: {missing}"


def contains(path, text):
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return m.find(text.encode()) >= 0


@pytest.mark.teeth
def test_a_reworded_message_fails_its_entry():
    error_id, entry = next((i, e) for i, e in CORPUS.items() if e["printed"] == "live")
    literal = entry["expect"].split("*")[0] or entry["expect"].split("*")[1]
    assert not error_entries.expected(entry, RELEASE).search(literal.replace(" ", "  ")), error_id


@pytest.mark.teeth
def test_an_error_without_an_entry_or_an_entry_twice_fails_the_build(tmp_path):
    first, second = list(CORPUS)[:2]
    (tmp_path / "a.md").write_text(f"### A\n\n<!-- error: {first} -->\n")
    with pytest.raises(PluginError, match="no page explains"):
        error_entries.check_markers(tmp_path, {first: {}, second: {}})
    (tmp_path / "b.md").write_text(f"### B\n\n<!-- error: {first} -->\n")
    with pytest.raises(PluginError, match="more than one marker"):
        error_entries.check_markers(tmp_path, {first: {}})
    (tmp_path / "b.md").write_text("### B\n\n<!-- error: no-such-error -->\n")
    with pytest.raises(PluginError, match="no entry in code/errors/corpus.yml"):
        error_entries.check_markers(tmp_path, {first: {}})


def test_a_trigger_that_hangs_ends_the_run_at_its_deadline_and_names_itself():
    """A trigger stuck for good (a forked worker waiting on a lock its parent held when it
    forked) must not hang the build until the lab's own limit: the script ends it, its name
    the last line printed, with the stack where it stuck. The deadline is made 2 s here."""
    hang = (
        "import runpy, sys, time; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
        "import pace, triggers; pace.limit = lambda seconds: 2; "
        "triggers.stuck_for_good = lambda tmp: time.sleep(600); "
        "sys.argv = [sys.argv[3], 'default-pg-not-initialized', 'stuck-for-good']; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    script = ROOT / "code" / "errors" / "reproduce.py"
    done = subprocess.run(
        [sys.executable, "-c", hang, str(ROOT / "code"), str(script.parent), str(script)],
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
    )
    assert done.returncode != 0
    assert done.stdout.rstrip().splitlines()[-1] == "== stuck-for-good ==", done.stdout
    assert "Timeout" in done.stderr and "in <lambda>" in done.stderr, done.stderr[-2000:]
