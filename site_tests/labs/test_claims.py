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
    diff = diffs.unified(
        ROOT, "code/first_job/train_single.py", "code/first_job/train_ddp.py"
    ).splitlines()
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
    """The figure's summary (hooks/views/overlap.py) says which step ended first, from the
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


# ---------------------------------------------------------------------------------------------
# Terms: defined (or sent to the chapter that explains them) where a reader first meets them
# ---------------------------------------------------------------------------------------------
def sentences(markdown):
    """The page's prose, one sentence a string: a blank line, a heading, a list item or an
    admonition's title ends one too (a full stop inside `code` does not)."""
    blocks = re.split(r"\n\s*\n|\n(?=\s*(?:#|- |\d+\. |!!!|\?\?\?))", markdown)
    found = []
    for block in blocks:
        text = prose(block).strip()
        found += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*`\[(])", text) if s]
    return found


# page: (how the term is spelled, what the sentence that first uses it must say)
FIRST_USES = {
    "01-first-job.md": [
        (r"torch\._dynamo", r"(?=.*init_process_group)(?=.*thread)(?=.*(?:SIGABRT|abort))"),
    ],
    "02-collectives.md": [
        (r"\bXCCL\b", r"Intel"),
        (r"\bNVLS\b", r"NVLink SHARP"),
        (r"\bCollNet\b", r"Scalable Hierarchical Aggregation"),
        (r"\bPAT\b", r"Parallel Aggregated Trees"),
        (r"\bnccl2\b", r"torchcomms"),
    ],
    "04-caveats.md": [
        (r"\b[Dd]ynamo\b", r"torch\.compile"),
        (r"\bDDPOptimizer\b", r"08-past-ddp\.md"),
    ],
    "08-past-ddp.md": [
        (r"\b[Dd]ynamo\b", r"torch\.compile"),
        (r"\bDTensors?\b", r"[Dd]istributed tensor"),
        (r"\bInductor\b", r"torch\.compile"),
    ],
}


def first_use(markdown, term):
    """The sentence in which `term` (a regex) first appears in the page's prose."""
    for sentence in sentences(markdown):
        if re.search(term, sentence):
            return sentence
    raise AssertionError(f"{term!r} is not on the page")


@pytest.mark.parametrize(
    ("name", "term", "definition"),
    [(name, term, said) for name, uses in FIRST_USES.items() for term, said in uses],
)
def test_a_term_is_explained_where_a_reader_first_meets_it(name, term, definition):
    sentence = first_use(page(name), term)
    assert re.search(definition, sentence), f"{name}: {term} first used unexplained: {sentence}"


def test_a_term_used_without_its_explanation_is_reported():
    markdown = "# T\n\nNCCL may pick NVLS here.\n- NVLS (NVLink SHARP) reduces in the switch.\n"
    assert first_use(markdown, r"\bNVLS\b") == "NCCL may pick NVLS here."


# ---------------------------------------------------------------------------------------------
# Chapter 2: what AVG did on gloo before torch 2.8.1, and the NCCL lab's "2.8 and newer"
# ---------------------------------------------------------------------------------------------
def test_the_avg_section_warns_of_the_releases_where_reduce_scatter_sums():
    """The source notes saw gloo's reduce_scatter with AVG return the sum, 3.0, for two ranks
    holding 1 and 2 (mean 1.5), on releases 2.4.1 to 2.8.0; a reader on one of them meets
    AVG in chapter 2, and the NCCL lab that says it runs on 2.8 must send them there."""
    avg = prose(section(page("02-collectives.md"), "`AVG` on gloo"))
    inputs = (1, 2)
    total, mean = float(sum(inputs)), sum(inputs) / len(inputs)
    assert "2.4.1" in avg and "2.8.0" in avg, "the releases where it sums are named"
    assert f"{total}" in avg and f"{mean}" in avg and "summed" in avg, avg
    lab = (ROOT / "docs" / "labs" / "ddp-nccl.md").read_text(encoding="utf-8")
    (claim,) = [p for p in lab.split("\n\n") if "2.8 and newer" in p]
    assert "02-collectives.md#avg-on-gloo" in claim, claim


# ---------------------------------------------------------------------------------------------
# Chapter 4: the deprecation warning is shown whole, or cut where a sentence ends
# ---------------------------------------------------------------------------------------------
def test_the_broadcast_buffers_warning_is_shown_in_whole_sentences(tmp_path):
    markdown = page("04-caveats.md")
    (code,) = [
        fence.code
        for fence in fences.python_fences(markdown.splitlines())
        if "broadcast_buffers=True" in fence.code
    ]
    stdout = run_fence(code, tmp_path)
    shown = stdout.strip()
    assert shown, "the block prints the warning"
    for line in shown.splitlines():
        assert line.count("`") % 2 == 0, f"a backtick left open: {line!r}"
    assert shown.endswith("."), f"cut mid-sentence: {shown!r}"


# ---------------------------------------------------------------------------------------------
# Chapter 6: Flight Recorder's one buffer, and the release CommDebugMode spans steps from
# ---------------------------------------------------------------------------------------------
SHARED_BUFFER = """
import pickle
import torch, torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
try:
    busy = dist.new_group([0])
    dist.all_reduce(torch.ones(4))  # the world group's one collective
    for _ in range(3):
        dist.all_reduce(torch.ones(4), group=busy)
    entries = pickle.loads(_dump_fr_trace(True, False, False))["entries"]
finally:
    dist.destroy_process_group()
print(sorted({entry["pg_id"] for entry in entries}))
"""


def test_flight_recorder_keeps_one_buffer_that_every_group_shares(tmp_path):
    """A three-entry buffer, one world collective, then three in a subgroup: if each group
    had a buffer of its own the world's entry would stay; one shared buffer drops it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_FR")}
    done = subprocess.run(
        [sys.executable, "-c", SHARED_BUFFER],
        capture_output=True,
        text=True,
        env=env | {"TORCH_FR_BUFFER_SIZE": "3"},
        timeout=pace.limit(60),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[1]"], "only the busy subgroup's entries are left"
    recorder = prose(section(page("06-debugging.md"), "Flight Recorder"))
    assert "of each process group" not in recorder, "one buffer per group: not so"
    assert re.search(r"one (?:ring )?buffer", recorder) and "pg_id" in recorder, recorder
    assert re.search(r"evict|push(?:es)? out|crowd", recorder), "the eviction is the lesson"


def test_commdebugmode_spans_steps_from_the_release_its_block_tests():
    text = section(page("06-debugging.md"), "Counting collectives: `CommDebugMode`")
    (said,) = re.findall(r"(?:In|Since) (2\.\d+),? one block can span", prose(text))
    code = python_fence(page("06-debugging.md"), "CommDebugMode over two steps")
    (tested,) = re.findall(r"torch\.__version__ >= \(2, (\d+)\)", code)
    (changed,) = re.findall(r'!!! note "Changed in (2\.\d+)"', text)
    assert said == f"2.{tested}" == changed, (said, tested, changed)


# ---------------------------------------------------------------------------------------------
# The labs: the gloo lab's memcpy words, and gloo's `$n` in the two-node trap
# ---------------------------------------------------------------------------------------------
def test_the_gloo_lab_says_how_its_memcpy_counts_bytes(lab_record):
    record = lab_record("gloo")
    copy = record["result"]["memcpy_4mib"]
    assert copy["GBps"] == pytest.approx(copy["bytes"] / copy["seconds"] / 1e9), "once"
    (line,) = [line for line in record["stdout"].splitlines() if "x memcpy" in line]
    assert "read + write" not in line, f"a copy counted once is not read + write: {line}"
    assert "counted once" in line, line


def test_the_two_node_trap_says_what_gloos_dollar_suffix_is():
    """Gloo's Address::str() appends `$<n>`, the pair's sequence number, to the address it
    could not reach; torch prints gloo's words as they are, so the page says what it is."""
    record = json.loads((ROOT / "docs" / "labs" / "recorded" / "two_nodes.json").read_text())
    trap = record["stdout"].split("== trap ==", 1)[1].split("\n== ", 1)[0]
    assert re.search(r"\]:\d+\$\d+", trap), "no `$n` any more: this check has nothing to say"
    page_text = (ROOT / "docs" / "labs" / "two-nodes.md").read_text(encoding="utf-8")
    after = prose(between(page_text, "<!-- lab:two-nodes:nodes-trap -->", "## "))
    assert re.search(r"`\$\d*`.*sequence number|sequence number.*`\$", after), after
