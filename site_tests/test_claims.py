"""What the pages say, checked against what sits beside it: a diff, a block's output, a lab's
figure, torch's own behaviour, the page's own checklist.

Each test reads the Markdown a reader is shown (no site is built), and, where the claim is
about what code does, runs that code: a fence the way the build runs it, the cheat sheet's
template under torchrun. The labs' own numbers are checked beside their labs
(test_compile_ddp.py, test_zero_lab.py); these tests hold the prose to them.
"""

import ast
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from site_tests.conftest import ROOT, pace

sys.path.insert(0, str(ROOT / "hooks"))
import diffs  # noqa: E402  (the hook that draws chapter 1's diff)
import fences  # noqa: E402  (how the build finds a page's python fences)
from fencerunner import WARNINGS_AS_ERRORS  # noqa: E402

CHAPTERS = ROOT / "docs" / "chapters"
CHEAT_SHEET = ROOT / "docs" / "cheatsheet.md"
NUMBER_WORDS = {"ten": 10, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40}
NUMBER_WORDS |= {"fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}


# ---------------------------------------------------------------------------------------------
# Reading pages
# ---------------------------------------------------------------------------------------------
def page(name):
    return (CHAPTERS / name).read_text(encoding="utf-8")


def prose(markdown):
    """The page less its fenced blocks and HTML comments, whitespace collapsed."""
    kept, fence = [], None
    for line in markdown.splitlines():
        opening = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence:
            if line.strip() and set(line.strip()) == {fence[0]} and len(line.strip()) >= len(fence):
                fence = None
            continue
        if opening:
            fence = opening[1]
            continue
        kept.append(line)
    text = re.sub(r"<!--.*?-->", " ", "\n".join(kept), flags=re.S)
    return re.sub(r"\s+", " ", text)


def section(markdown, heading):
    """From the heading `heading` (any level) to the next heading of that level or above; a
    `# comment` inside a fence is code, not a heading."""
    lines, level, kept, fence = markdown.splitlines(), None, [], None
    for line in lines:
        opening = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and not opening:
            heading_match = re.match(r"^(#+) (.*?)\s*$", line)
            if heading_match and level is None and heading_match[2] == heading:
                level = len(heading_match[1])
                continue
            if heading_match and level is not None and len(heading_match[1]) <= level:
                break
        if fence is None and opening:
            fence = opening[1]
        elif fence and line.strip() and set(line.strip()) == {fence[0]}:
            fence = None if len(line.strip()) >= len(fence) else fence
        if level is not None:
            kept.append(line)
    assert level is not None, f"no heading {heading!r}"
    return "\n".join(kept) + "\n"


def between(markdown, start, end):
    """The Markdown between two marker lines."""
    return markdown.split(start, 1)[1].split(end, 1)[0]


def python_fence(markdown, title):
    """The code of the python fence titled `title`."""
    lines = markdown.splitlines()
    for fence in fences.python_fences(lines):
        if f'title="{title}"' in lines[fence.line - 1]:
            return fence.code
    raise AssertionError(f"no python fence titled {title!r}")


def number(word):
    return int(word) if word.isdigit() else NUMBER_WORDS[word.lower()]


def run_fence(code, tmp_path):
    """What a fence prints, run as the build runs it (hooks/fencerunner.py, warnings as errors)."""
    jobs, results = tmp_path / "jobs.json", tmp_path / "results.json"
    jobs.write_text(json.dumps([{"id": "fence", "code": code}]))
    done = subprocess.run(
        [
            sys.executable,
            *WARNINGS_AS_ERRORS,
            str(ROOT / "hooks" / "fencerunner.py"),
            jobs,
            results,
        ],
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
    )
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(results.read_text())
    assert result["error"] is None, result["error"]
    return result["stdout"]


# ---------------------------------------------------------------------------------------------
# Chapter 1: the lines DDP adds, and where the course ends
# ---------------------------------------------------------------------------------------------
def test_chapter_1_counts_the_lines_its_diff_adds():
    text = prose(page("01-first-job.md"))
    claims = re.findall(r"about (\w+) (?:extra |more |added )?lines", text)
    assert claims, "chapter 1 no longer says how many lines the DDP version adds"
    diff = diffs.unified(ROOT, "code/train_single.py", "code/train_ddp.py").splitlines()
    added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
    for claim in claims:
        stated = number(claim)
        # "about": within a tenth of the count the diff beneath it shows
        assert abs(stated - added) <= added / 10, f"the page says {stated}, the diff adds {added}"


def test_chapter_1_does_not_end_the_course_before_chapter_8():
    past_ddp = page("08-past-ddp.md")
    assert "ZeroRedundancyOptimizer" in past_ddp and "fully_shard" in past_ddp
    where = section(page("01-first-job.md"), "Where DDP sits among the parallelisms")
    assert not re.search(r"stops at DDP|only DDP|no further than DDP", where), where
    assert "(08-past-ddp.md" in where, "the parallelism table should point on to chapter 8"


# ---------------------------------------------------------------------------------------------
# Chapter 2: the gather rule, shown by the block that teaches it
# ---------------------------------------------------------------------------------------------
def test_the_world_size_1_block_shows_and_asserts_the_gather_rule(tmp_path):
    code = python_fence(page("02-collectives.md"), "collectives at world size 1")
    assert re.search(r"assert gathered\.shape\[0\] == p \* rows", code), "the rule is asserted"
    stdout = run_fence(code, tmp_path)
    # the output spells out p x rows, so that p = 1 still shows where the rows come from
    (shown,) = re.findall(r"all_gather_single: .*?(\d+) x (\d+) = (\d+) rows", stdout)
    p, rows, out = map(int, shown)
    assert p * rows == out, stdout
    assert "refused" in stdout, "a buffer sized for another world is refused, in the output"


# ---------------------------------------------------------------------------------------------
# Chapter 3: the overlap figure's text leaves the verdict to the run
# ---------------------------------------------------------------------------------------------
def test_the_overlap_prose_makes_no_verdict_of_its_own():
    """The figure's summary (hooks/figure_views.py) says which step ended first, from the
    record; prose beside it that decides for itself contradicts one run or the next."""
    near = prose(between(page("03-ddp.md"), "<!-- lab:overlap:overlap -->", "### ")).lower()
    for verdict in ("not a gain", "no gain", "is a gain", "faster", "slower", "earlier", "later"):
        assert verdict not in near, f"the prose decides the run's verdict: {verdict!r}"
    assert "under the figure" in near, "the prose should send the reader to the run's verdict"


def test_ddp_makes_fewer_calls_than_the_naive_loop_as_chapter_3_says(lab_record):
    """The prose warns that the two rows differ in more than overlap: DDP's buckets are fewer
    calls than the naive loop's one per tensor. The build's own run must bear that out."""
    near = prose(between(page("03-ddp.md"), "<!-- lab:overlap:overlap -->", "### "))
    assert "fewer, larger calls than the naive loop's one per tensor" in near
    result = lab_record("overlap")["result"]
    for ddp, naive in zip(result["ddp"]["runs"], result["naive"]["runs"], strict=True):
        assert len(ddp["buckets"]) < len(naive["allreduces"]) == len(result["parameters"])


# ---------------------------------------------------------------------------------------------
# Chapters 3 and 8: an explicit bucket_cap_mb
# ---------------------------------------------------------------------------------------------
def test_chapters_3_and_8_agree_on_an_explicit_bucket_cap():
    """Chapter 3's block shows that an explicit cap, even 25, removes DDP's small first bucket;
    chapter 8 must not explain its graphs by DDP keeping that bucket, and must show why the
    graphs are cut at 1 MiB anyway: dynamo hands DDPOptimizer DDP's cap, never its first one."""
    rebuild = python_fence(page("03-ddp.md"), "bucket rebuild")
    assert "explicit = bucket_layouts(3, bucket_cap_mb=25)" in rebuild
    assert "assert explicit[1] == [[3, 2, 1, 0]]" in rebuild
    past_ddp = page("08-past-ddp.md")
    near = prose(between(past_ddp, "<!-- lab:compile-ddp:compile-graphs -->", "### "))
    assert "keeps DDP's rule" not in near and "explicit" in near, near
    answers = prose(section(past_ddp, "Check yourself"))
    assert "first bucket stays" not in answers, "DDP keeps no small bucket at an explicit cap"
    assert "DDPOptimizer(bucket_bytes_cap=" in past_ddp and "first_bucket_cap ==" in past_ddp


# ---------------------------------------------------------------------------------------------
# The cheat sheet: its template follows its own checklist, and runs
# ---------------------------------------------------------------------------------------------
def template():
    text = section(CHEAT_SHEET.read_text(encoding="utf-8"), "The lines a DDP script adds")
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    return code


def calls(node):
    """Dotted names of every call under `node`, in source order: ['dist.barrier', ...]."""
    found = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    found.sort(key=lambda n: (n.lineno, n.col_offset))
    return [ast.unparse(n.func) for n in found]


def test_the_template_keeps_the_checklist():
    tree = ast.parse(template())
    (guarded,) = [node for node in tree.body if isinstance(node, ast.Try)]
    body = ast.Module(body=guarded.body, type_ignores=[])
    # teardown in `finally`: the DDP model deleted, then the group destroyed
    final = [ast.unparse(node) for node in guarded.finalbody]
    assert final == ["del model", "dist.destroy_process_group()"], final
    assert "dist.destroy_process_group" not in calls(body), "torn down outside the finally"
    # one writer, rank 0, writing atomically: a temporary file, flushed to disk, renamed
    (writer,) = [
        node
        for node in ast.walk(body)
        if isinstance(node, ast.If) and "dist.get_rank() == 0" in ast.unparse(node.test)
    ]
    written = calls(writer)
    for step in ("torch.save", "os.fsync", "os.replace"):
        assert step in written, f"rank 0's save lacks {step}"
    assert written.index("torch.save") < written.index("os.fsync") < written.index("os.replace")
    assert "model.module.state_dict()" in ast.unparse(writer), "no 'module.' prefix"
    # nobody reads the file before it is whole: a barrier after the save, before the load
    order = calls(body)
    assert order.index("os.replace") < order.index("dist.barrier") < order.index("torch.load")
    assert "map_location" in ast.unparse(body)


# What the template leaves to the script around it: imports, a model, a dataset, epochs.
AROUND_TEMPLATE = """
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler, TensorDataset

model = torch.nn.Linear(4, 2)
dataset = TensorDataset(torch.randn(8, 4))
epochs = 2
"""


@pytest.mark.timeout(120)
def test_the_template_runs_under_torchrun_and_leaves_a_whole_checkpoint(tmp_path):
    script = tmp_path / "template.py"
    script.write_text(AROUND_TEMPLATE + template() + "\nprint(sorted(state))\n")
    environment = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    done = subprocess.run(
        [*command, "--nproc_per_node=2", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment | {"CUDA_VISIBLE_DEVICES": ""},
        timeout=pace.limit(60),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("['bias', 'weight']") == 2, done.stdout  # both ranks read it
    assert (tmp_path / "ckpt.pt").exists() and not (tmp_path / "ckpt.pt.tmp").exists()


def test_the_template_fits_the_page():
    assert max(len(line) for line in template().splitlines()) <= 88
    assert textwrap.dedent(template()) == template()
