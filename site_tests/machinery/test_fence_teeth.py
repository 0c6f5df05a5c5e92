"""The core fences of the chapters (docs/chapters/*.md) must be able to fail.

Each fence below is taken from the chapters by its title, run as written (it must pass), then run
again with one claim broken by a text substitution (each mutant must end in AssertionError, not
in some other error that would pass for the wrong reason). A missing fence or a substitution that
no longer matches fails the test, so editing the page cannot quietly disarm it.

All runs share one subprocess, so torch is imported once:

    python -m pytest site_tests/machinery/test_fence_teeth.py -q
"""

import json
import pathlib
import re
import subprocess
import sys

import pytest

from hooks import fence_parser
from hooks.fencerunner import WARNINGS_AS_ERRORS
from site_tests.conftest import pace

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "docs" / "chapters").glob("*.md"))
# One process runs every original and mutant (about 60 fences): seconds at pace's reference
# machine, so the bound is generous; pace stretches it on a slower or shared one.
TIMEOUT_S = 300

# A fence's title, in its info string: ```python title="..."
TITLE = re.compile(r'\btitle="(?P<title>[^"]+)"')

# fence title -> substitutions (old text, new text); every one breaks the claim the fence checks
MUTANTS = {
    "one all-reduce, by hand": [
        ("averaged = (rank0 + rank1) / 2", "averaged = rank0 + rank1"),
        ("weight_grad(x[4:], y[4:])", "weight_grad(x[:4], y[:4])"),
    ],
    "collectives at world size 1": [
        (
            "torch.testing.assert_close(doubled.wait(), 2 * x)",
            "torch.testing.assert_close(doubled.wait(), 3 * x)",
        ),
        (
            "output one chunk\n    torch.testing.assert_close(shard, x)",
            "output one chunk\n    torch.testing.assert_close(shard, x + 1)",
        ),
        (
            "torch.testing.assert_close(received, tokens)",
            "torch.testing.assert_close(received, tokens.flip(0))",
        ),
    ],
    "shard gradient algebra": [
        ("sum(sum_grads) / B, full", "sum(sum_grads) / world, full"),
        ("sum(mean_grads) / world, full", "sum(mean_grads) / B, full"),
        ('reduction="sum") * world / N)', 'reduction="sum") / int(m.sum()))'),
    ],
    "ring byte model": [
        ('sent["all_gather"][r] += 1', 'sent["all_gather"][r] += 2'),
        ("chunk_bytes = Fraction(S, p)", "chunk_bytes = Fraction(S, p - 1)"),
        ("data[(r + 1) % p][j] += chunk", "data[(r + 1) % p][j] = chunk"),
    ],
    "what each rank holds": [
        ("torch.stack([x[r] for x in xs]).sum(0)", "torch.stack([x[0] for x in xs]).sum(0)"),
        ("torch.stack(pieces) for _", "torch.stack(pieces[::-1]) for _"),
        ("total = torch.stack(xs).sum(0)", "total = torch.stack(xs).mean(0)"),
        ("[torch.stack([x[r] for x in xs]) for r", "[torch.stack([x[-r] for x in xs]) for r"),
    ],
    "algbw and busbw": [
        ("busbw = algbw * 2 * (ranks - 1) / ranks", "busbw = algbw * (ranks - 1) / ranks"),
    ],
    "DistributedSampler": [
        ("    sampler.set_epoch(1)\n", "    pass\n"),
        ("padded = order + order[:2]", "padded = order + order[-2:]"),
        ("padded[r::world] for r", "padded[r * 4 : r * 4 + 4] for r"),
    ],
    "two drop_last flags": [
        ("drop_last=sampler_drop)", "drop_last=not sampler_drop)"),
        ("sampler=sampler, drop_last=loader_drop)", "sampler=sampler, drop_last=False)"),
    ],
    "per-rank seeds": [
        ("dropout_mask(BASE_SEED + rank) for", "dropout_mask(BASE_SEED) for"),
        (
            "DistributedSampler(range(8), WORLD, rank=0)",
            "DistributedSampler(range(8), WORLD, 0, seed=rank)",
        ),
    ],
    "rank-0 logging and checkpoint": [
        ("torch.save(ddp.module.state_dict(), partial)", "torch.save(ddp.state_dict(), partial)"),
    ],
    "NaN check on a collective": [
        ('os.environ["TORCH_DIST_NAN_CHECK"] = "1"', 'os.environ["TORCH_DIST_NAN_CHECK"] = "0"'),
    ],
    "CommDebugMode over two steps": [
        ("                dist.all_reduce(grads)\n", "                dist.barrier()\n"),
    ],
    "DDP reduces in the parameters' dtype": [
        ("nn.Linear(16, 4).to(param_dtype)", "nn.Linear(16, 4).to(torch.bfloat16)"),
    ],
    # fp16's hook is not checked against the build: a CPU-only build accepts it too
    "bf16_compress_hook, by build": [
        ("default_hooks.bf16_compress_hook)", "default_hooks.fp16_compress_hook)"),
    ],
    "no_sync and a counting hook": [
        ("with wrapped.no_sync():", "with torch.enable_grad():"),
        (
            "launched.append(bucket.buffer().numel())",
            "launched.extend([bucket.buffer().numel()] * 2)",
        ),
    ],
    "naive data parallelism": [
        ("        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)\n", ""),
    ],
    "bucket rebuild": [
        ("bucket_layouts(3, bucket_cap_mb=25)", "bucket_layouts(3, bucket_cap_mb=None)"),
        ("bucket_cap_mb_list=[2, 2]", "bucket_cap_mb_list=[1, 25]"),
    ],
    "gradients as bucket views": [
        ("gradient_as_bucket_view=as_view", "gradient_as_bucket_view=False"),
        ("buckets.append(bucket.buffer())", "buckets.append(bucket.buffer().clone())"),
    ],
    "autocast and GradScaler under DDP": [
        ('autocast("cpu", dtype=torch.float16)', 'autocast("cpu", dtype=torch.bfloat16)'),
        ("sent.append(bucket.buffer().dtype)", "sent.append(out.dtype)"),
    ],
    "clip after the sync": [
        (
            "right = clipped(sum(local) / 2, max_norm=1.0)",
            "right = sum(clipped(g, max_norm=1.0) for g in local) / 2",
        ),
        ("return grad * min(1.0, max_norm", "return grad * max(1.0, max_norm"),
    ],
    "finalize_backward": [
        ("ddp.finalize_backward()  # wait", "pass  # wait"),
        ("mul_(10)", "mul_(1)"),
    ],
    "PowerSGD by hand": [
        ("target = grad + residual", "target = grad"),
        ("p = p / p.norm()", "p = p / 2"),
    ],
    "ZeRO-1's bytes per parameter": [
        # the state not divided: plain DDP's 16 bytes at every world size
        ("return weights + grads + sharded / ranks", "return weights + grads + sharded"),
        # the fp32 master copy left out of what bf16 training shards
        ("sharded=12)", "sharded=8)"),
    ],
    "scaling model": [
        (
            "return 2 * (world - 1) / world * grad_bytes / bus_bytes_per_s",
            "return grad_bytes / bus_bytes_per_s",
        ),
        (
            "return 6 * params * tokens / flops_per_s",
            "return 4 * params * tokens / flops_per_s",
        ),
        ("S = 4 * P  #", "S = 2 * P  #"),
        ("return 0 if bucket_view else grad_bytes_each * params", "return 0"),
    ],
}

# Runs each job's source in a fresh namespace and records how it ended and what it printed.
RUNNER = r"""
import contextlib, io, json, sys, traceback

jobs = json.load(open(sys.argv[1]))
results = []
for job in jobs:
    out = io.StringIO()
    error = None
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(job["source"], "<" + job["title"] + ">", "exec"), {"__name__": "fence"})
    except BaseException as exc:  # a fence may end in anything; report it, never crash the runner
        error = {"type": type(exc).__name__, "trace": traceback.format_exc()[-2000:]}
    results.append({"title": job["title"], "mutant": job["mutant"], "error": error,
                    "stdout": out.getvalue()})
json.dump(results, open(sys.argv[2], "w"))
"""


def page_fences():
    """Every titled top-level python fence of the chapters, by title: (page, body).

    A title used twice, on one page or on two, is an error."""
    fences = {}
    for page in CHAPTERS:
        for fence in fence_parser.python_fences(page.read_text(encoding="utf-8")):
            titled = TITLE.search(fence.info)
            if fence.nested or not titled:
                continue
            if titled["title"] in fences:
                raise AssertionError(f"{page.name}: fence title {titled['title']!r} is used twice")
            fences[titled["title"]] = (page, fence.code)
    return fences


def build_jobs():
    """The original of each fence under test, followed by its mutants."""
    fences = page_fences()
    jobs = []
    for title, substitutions in MUTANTS.items():
        if title not in fences:
            raise AssertionError(f'no chapter has a fence ```python title="{title}"')
        source = fences[title][1]
        jobs.append({"title": title, "mutant": None, "source": source})
        for old, new in substitutions:
            found = source.count(old)
            if found != 1:
                raise AssertionError(f"fence {title!r}: expected {old!r} once, found it {found}x")
            jobs.append({"title": title, "mutant": old, "source": source.replace(old, new)})
    return jobs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run every original and mutant in one subprocess; results grouped by fence title."""
    work = tmp_path_factory.mktemp("fence_teeth")
    jobs_file, results_file = work / "jobs.json", work / "results.json"
    jobs_file.write_text(json.dumps(build_jobs()))
    command = [
        sys.executable,
        *WARNINGS_AS_ERRORS,
        "-c",
        RUNNER,
        str(jobs_file),
        str(results_file),
    ]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=pace.limit(TIMEOUT_S)
    )
    assert done.returncode == 0, f"runner failed:\n{done.stdout}\n{done.stderr}"
    grouped = {}
    for result in json.loads(results_file.read_text()):
        grouped.setdefault(result["title"], []).append(result)
    return grouped


@pytest.mark.parametrize("title", list(MUTANTS))
def test_fence_passes_and_its_mutants_fail(runs, title):
    original, *mutants = runs[title]
    assert original["mutant"] is None
    assert original["error"] is None, f"fence {title!r} fails as written:\n{original['error']}"
    assert len(mutants) == len(MUTANTS[title])
    for mutant in mutants:
        error = mutant["error"]
        assert error is not None, f"fence {title!r} still passes with {mutant['mutant']!r} broken"
        assert error["type"] == "AssertionError", (
            f"fence {title!r} with {mutant['mutant']!r} broken ended in {error['type']}, "
            f"not AssertionError:\n{error['trace']}"
        )


def test_scaling_table_is_printed_not_copied(runs):
    """The build shows the scaling fence's output under it: the table is that output.

    The fence must print one row per batch size it tries, and the page must not carry a
    hand-copied Markdown version of it, which would go stale when the model changes."""
    printed = runs["scaling model"][0]["stdout"].splitlines()
    source = page_fences()["scaling model"][1]
    (sizes,) = re.findall(r"for tokens in \(1024 \* k for k in \(([\d, ]+)\)\)", source)
    rows = [line for line in printed if re.match(r"^\s*[\d,]+\s+[\d.]+\s", line)]
    assert len(rows) == len(sizes.split(",")), f"one row per batch size:\n{printed}"
    page = page_fences()["scaling model"][0].read_text(encoding="utf-8")
    assert "| Tokens per GPU |" not in page, "a hand-copied table duplicates the output"
