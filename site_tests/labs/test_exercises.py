"""The exercises are gradable: every solution passes, every starter fails for its own gap.

Each run below is one `grade.py --json` process, so each exercise's tests run once per mode:
- the solutions: the build's `exercises` lab run itself, from its record (conftest.py's
  lab_record), so that under `nox -s tests` they are graded once for the page and the tests;
and, over a folder laid out as a learner's download:
- the starters, where each exercise must fail with its own NotImplementedError (exercise 4,
  which builds on exercise 3, is graded beside exercise 3's solution; exercise 7 has no gap
  to fill, only bugs: its starter must hang, the first of them; exercise 8's starter is a
  working single-device script: it must fail for want of DDP);
- solutions broken on purpose, one claim at a time, where exactly the test that guards the
  claim must fail: the proof that the checks have teeth, including the hang message and the
  "first all_reduce before backward finishes" timestamps.
The last two judge the graders, not torch: they are marked `teeth`, and the release matrix
leaves them to the pinned release.

Every run gets a temp dir of its own as TMPDIR and a session of its own; afterwards both
must be empty. The cache key of the build's grading run is tested at the end.
"""

import html
import importlib.util
import json
import multiprocessing
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

from site_tests.conftest import ARCHIVES_HOOK, ROOT, declared, labrunner, mkdocs_build, pace

EXERCISES = ROOT / "exercises"
SOLUTIONS = EXERCISES / "solutions"
TORCH_OWN = labrunner.TORCH_OWN  # what torch keeps in TMPDIR, not the grader's
PAGES = EXERCISES / "pages"
NUMBERS = range(1, 10)
# Exercise 8 alone starts three torchrun jobs, with a restart in two: a minute or more.
RUN_TIMEOUT_S = 420


def learner_folder(path, solved=(), mutants=None):
    """A download-shaped folder: starters (or solutions for `solved`), tests, helpers.

    mutants: {exercise file: [(old, new), ...]} applied to that file's solution.
    """
    path.mkdir()
    for source in EXERCISES.glob("*.py"):
        shutil.copy(source, path / source.name)
    shutil.copy(EXERCISES / "pytest.ini", path / "pytest.ini")
    for name in solved:
        shutil.copy(SOLUTIONS / name, path / name)
    for name, replacements in (mutants or {}).items():
        text = (SOLUTIONS / name).read_text()
        for old, new in replacements:
            assert text.count(old) == 1, f"mutant of {name}: {old!r} is not in the solution once"
            text = text.replace(old, new)
        (path / name).write_text(text)
    return path


def grade(tmp_path, folder, *args):
    """Run folder/grade.py; return {exercise: row}, after checking it left nothing behind."""
    scratch, result = tmp_path / f"tmp-{folder.name}", tmp_path / f"{folder.name}.json"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("EXERCISES_FROM", "PYTHONPATH")}
    proc = subprocess.Popen(
        [sys.executable, str(folder / "grade.py"), *args, "--json", str(result)],
        cwd=folder,
        env=dict(env, TMPDIR=str(scratch)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=pace.limit(RUN_TIMEOUT_S))
    finally:
        leftovers = labrunner.kill_leftovers(proc.pid)  # the grader too, if it ran out of time
    assert not leftovers, f"the grader left processes behind:\n{output}"
    left = [path.name for path in scratch.iterdir() if not path.name.startswith(TORCH_OWN)]
    assert not left, f"the grader left {left} in TMPDIR"
    assert "Traceback" not in output, output
    rows = json.loads(result.read_text())["rows"]
    return {row["exercise"]: row for row in rows}, proc.returncode, output


@pytest.fixture(scope="module")
def solutions(lab_record):
    """The build's grading run (`grade.py --solutions`); a non-zero exit fails it here."""
    return lab_record("exercises")


@pytest.fixture(scope="module")
def starters(tmp_path_factory, exercises_download):
    """The starters as a learner downloads them, graded (test_archives.py runs plain pytest in
    the same download)."""
    return grade(tmp_path_factory.mktemp("starters"), exercises_download)


@pytest.fixture(scope="module")
def starter_4_on_solution_3(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("starter4")
    return grade(tmp, learner_folder(tmp / "ex4", solved=["ex3_bucketed_ddp.py"]), "ex4")


def test_there_are_nine_exercises_each_with_tests_solution_and_page():
    for number in NUMBERS:
        (starter,) = EXERCISES.glob(f"ex{number}_*.py")
        assert (EXERCISES / f"test_{starter.name}").is_file()
        assert (SOLUTIONS / starter.name).is_file()
        page = (EXERCISES / "pages" / starter.with_suffix(".md").name).read_text()
        assert page.startswith(f"## Exercise {number}: ")
        assert f'--8<-- "exercises/solutions/{starter.name}"' in page
        assert page.count('??? tip "Hint') in (2, 3)
        assert '??? success "Solution"' in page


def test_every_solution_passes(solutions):
    rows = {row["exercise"]: row for row in solutions["result"]["rows"]}
    assert sorted(rows) == list(NUMBERS)
    for number, row in rows.items():
        assert row["solved"], f"exercise {number}'s solution fails: {row['first_failure']}"
    assert "9 of 9 solved" in solutions["stdout"]
    assert "Traceback" not in solutions["stderr"], solutions["stderr"]
    assert solutions["left_processes"] == [], "the grader left processes behind"
    assert solutions["left_files"] == [], f"the grader left {solutions['left_files']} in TMPDIR"


@pytest.mark.teeth  # a starter is a solution left unfinished on purpose
@pytest.mark.parametrize("number", [1, 2, 3, 5, 6, 9])
def test_each_starter_fails_for_the_gap_it_leaves(starters, number):
    rows, returncode, _ = starters
    row = rows[number]
    assert not row["solved"] and returncode == 1
    assert f"NotImplementedError: exercise {number}: " in row["first_failure"]


@pytest.mark.teeth
def test_starter_4_fails_for_its_own_gap_once_exercise_3_is_solved(starter_4_on_solution_3):
    rows, returncode, _ = starter_4_on_solution_3
    assert list(rows) == [4] and returncode == 1
    assert "NotImplementedError: exercise 4: " in rows[4]["first_failure"]


def test_a_learner_file_that_holds_anything_is_graded_not_crashed_on(tmp_path):
    folder = learner_folder(tmp_path / "odd")
    (folder / "ex2_naive_data_parallel.py").write_text("import torch\n")  # no docstring
    (folder / "ex3_bucketed_ddp.py").write_text("def broken(:\n")  # a syntax error
    (folder / "ex5_comm_hook.py").write_bytes(b'"""Exercise 5\xff"""\n')  # not UTF-8
    rows, returncode, output = grade(tmp_path, folder, "2", "3", "5")
    assert returncode == 1 and "0 of 3 solved" in output, output
    for number, stem in (
        (2, "ex2_naive_data_parallel"),
        (3, "ex3_bucketed_ddp"),
        (5, "ex5_comm_hook"),
    ):
        assert rows[number]["title"] == stem and not rows[number]["solved"], rows[number]
        assert rows[number]["first_failure"], rows[number]


@pytest.mark.teeth
def test_the_grader_in_the_download_prints_the_scoreboard(starters):
    _, _, output = starters
    assert "0 of 9 solved" in output
    assert "rank 0 raised NotImplementedError: exercise 1: " in output


@pytest.mark.teeth
def test_starter_7_hangs_and_says_so(starters):
    rows, _, _ = starters
    assert "lost its peers in exercise 7's script" in rows[7]["first_failure"]


@pytest.mark.teeth
def test_starter_8_trains_alone_and_says_ddp_is_missing(starters):
    rows, _, _ = starters
    assert "rank 0 never wrapped its model in DistributedDataParallel" in rows[8]["first_failure"]


# ---------------------------------------------------------------------------------------------
# Teeth: break one claim of a solution, and exactly its test fails
# ---------------------------------------------------------------------------------------------
MUTANT_SETS = {
    "first": {
        # a rank that never sends: the receive must time out into the plain-words message
        "ex1_ring_all_reduce.py": [
            ("    sending = dist.isend(outgoing, dst=(rank + 1) % p)\n", ""),
            ("    sending.wait()\n", ""),
        ],
        # a sum where a mean belongs
        "ex2_naive_data_parallel.py": [("param.grad /= dist.get_world_size()", "pass")],
        # every all_reduce launched at the end of backward: right answers, no overlap
        "ex3_bucketed_ddp.py": [
            (
                "        if self.ready == len(self.params):\n"
                "            self.work = dist.all_reduce(self.buffer, async_op=True)\n",
                "",
            ),
            (
                '            raise RuntimeError("a bucket never filled: is a parameter unused?")',
                "            self.work = dist.all_reduce(self.buffer, async_op=True)",
            ),
        ],
        # float32 on the wire: accurate, but no bytes saved
        "ex5_comm_hook.py": [("buffer.to(torch.bfloat16)", "buffer.clone()")],
        # Join that divides by the ranks still training: finishes, wrong parameters
        "ex6_uneven_inputs.py": [
            ("with Join([model]):", "with Join([model], divide_by_initial_world_size=False):")
        ],
        # set_epoch forgotten again
        "ex7_fix_this_script.py": [("        sampler.set_epoch(epoch)", "        pass")],
        # the random generator's state saved but not restored: other dropout masks
        "ex8_convert_your_script.py": [('        torch.set_rng_state(state["rng"])\n', "")],
        # ZeRO-1 without the sharding: every rank keeps and steps the whole state
        "ex9_shard_optimizer_state.py": [
            (
                "optimizer_class(owned_parameters(self.params, rank, world_size), **defaults)",
                "optimizer_class(self.params, **defaults)",
            )
        ],
    },
    "second": {
        # reduce-scatter without the all-gather
        "ex1_ring_all_reduce.py": [
            (
                "    for step in range(p - 1):  # all-gather",
                "    for step in range(0):  # all-gather",
            )
        ],
        # no_sync without `finally`
        "ex4_no_sync.py": [
            (
                "try:\n            yield\n        finally:\n            self.syncing = True",
                "yield\n        self.syncing = True",
            )
        ],
        # the mean forgotten in the compressed hook
        "ex5_comm_hook.py": [(".div_(dist.get_world_size(group))", "")],
        # one bucket for parameters of two dtypes, in the first one's dtype
        "ex3_bucketed_ddp.py": [
            (
                "            or (param.dtype, param.device)"
                " != (current[0].dtype, current[0].device)\n",
                "",
            )
        ],
        # evaluation through DistributedSampler again: padding counted
        "ex7_fix_this_script.py": [
            (
                "Subset(dataset, range(rank, len(dataset), world_size))",
                "Subset(dataset, [*range(rank, len(dataset), world_size)] + [0] * rank)",
            )
        ],
        # the sampler's epoch not restored: the resumed epoch replays epoch 0's order
        "ex8_convert_your_script.py": [('        sampler.set_epoch(state["sampler_epoch"])\n', "")],
        # each shard stepped, but never shared: the ranks drift apart
        "ex9_shard_optimizer_state.py": [("dist.broadcast(param, src=owner)", "pass")],
    },
    # The defects an outside DDP test suite found that the graders once passed: the models
    # now have frozen parameters, a tied weight, a buffer, and other weights on each rank.
    "third": {
        # frozen parameters left out of the broadcast
        "ex2_naive_data_parallel.py": [
            (
                "for tensor in [*model.parameters(), *model.buffers()]:",
                "for tensor in [*(p for p in model.parameters() if p.requires_grad), "
                "*model.buffers()]:",
            )
        ],
        # no broadcast at construction
        "ex3_bucketed_ddp.py": [
            ("                dist.broadcast(tensor, src=0)", "                pass")
        ],
        # `state` ignored: the default group, whatever group DDP runs on
        "ex5_comm_hook.py": [("    group = state  #", "    group = None  #")],
        # written straight under the checkpoint's name: a crash mid-write leaves a torn file
        "ex8_convert_your_script.py": [('    tmp = final.with_suffix(".tmp")', "    tmp = final")],
        # a tied weight kept once per layer that uses it: two owners, or one stepping it twice
        "ex9_shard_optimizer_state.py": [
            ("            continue  # a tied weight", "            pass  # a tied weight")
        ],
    },
    "fourth": {
        # a gradient that is None skipped: the ranks' all_reduces pair up different parameters
        "ex2_naive_data_parallel.py": [
            ("            param.grad = torch.zeros_like(param)", "            continue")
        ],
        # hooks and buckets on frozen parameters too
        "ex3_bucketed_ddp.py": [
            (
                "params = [p for p in module.parameters() if p.requires_grad]",
                "params = list(module.parameters())",
            )
        ],
        # no DDP: each rank trains on its half alone
        "ex8_convert_your_script.py": [("    model = DDP(net)", "    model = net")],
        # frozen parameters given an owner
        "ex9_shard_optimizer_state.py": [
            ("            continue  # frozen", "            pass  # frozen")
        ],
    },
    "fifth": {
        # a tied weight listed twice
        "ex3_bucketed_ddp.py": [
            (
                "params = [p for p in module.parameters() if p.requires_grad]",
                "params = [p for _, p in module.named_parameters(remove_duplicate=False) "
                "if p.requires_grad]",
            )
        ],
        # ranks that start apart: seeded by rank, each draws its own dropout masks
        "ex8_convert_your_script.py": [
            ("    torch.manual_seed(SEED)  #", "    torch.manual_seed(SEED + rank)  #")
        ],
        # zero_grad clears only the shard's gradients: a stale one reaches the owner's mean
        "ex9_shard_optimizer_state.py": [
            (
                "        for param in self.params:\n            param.grad = None",
                "        self.local.zero_grad()",
            )
        ],
    },
    "sixth": {
        # parameters broadcast, buffers not
        "ex3_bucketed_ddp.py": [
            (
                "for tensor in [*module.parameters(), *module.buffers()]:",
                "for tensor in module.parameters():",
            )
        ],
        # only rank 0 resumes; DDP's broadcast brings back its weights, nothing else
        "ex8_convert_your_script.py": [("    if step:\n", "    if step and rank == 0:\n")],
        # round robin in the model's order: every 64-element weight lands on rank 0
        "ex9_shard_optimizer_state.py": [
            (
                "    for param in sorted(trainable, key=torch.Tensor.numel, reverse=True):\n"
                "        owner = loads.index(min(loads))",
                "    for index, param in enumerate(trainable):\n        owner = index % world_size",
            )
        ],
    },
    # Defects whose first message once named another cause (issue 30): see FIRST_LINES.
    "seventh": {
        # no zero-fill: the all_reduce of a gradient that is None
        "ex2_naive_data_parallel.py": [
            (
                "        if param.grad is None:\n"
                "            # Unused in this rank's loss, maybe used in another's. Every rank must"
                " join the\n"
                "            # same all_reduces in the same order, so this one adds zeros.\n"
                "            param.grad = torch.zeros_like(param)\n",
                "",
            )
        ],
        # the last bucket never flushed: the bucket still open after the loop is dropped
        "ex3_bucketed_ddp.py": [
            ("    return buckets + [current] if current else buckets", "    return buckets")
        ],
    },
    "eighth": {
        # divided twice: before the sum and after it
        "ex2_naive_data_parallel.py": [
            (
                "        dist.all_reduce(param.grad)  #",
                "        param.grad /= dist.get_world_size()\n"
                "        dist.all_reduce(param.grad)  #",
            )
        ],
        # the last bucket never flushed, and hooks only on the parameters in a bucket: the
        # first layer's gradient stays each rank's own
        "ex3_bucketed_ddp.py": [
            ("    return buckets + [current] if current else buckets", "    return buckets"),
            ("        for param in params:\n", "        for param in self.bucket_of:\n"),
        ],
    },
}

RESUMES = {
    "test_a_killed_rank_resumes_to_the_same_bits",
    "test_a_rank_killed_mid_save_resumes_to_the_same_bits",
}
EXPECTED = {
    ("first", 1): (
        {"*"},
        # whichever rank times out first names itself: 0 or 1
        "waited 10 s in exercise 1's ring_all_reduce: a rank did not send",
    ),
    ("first", 2): (
        {
            "test_every_rank_steps_with_the_full_batch_gradient",
            "test_training_matches_the_full_batch_reference",
        },
        "every gradient on rank 0 is 2 times the full-batch gradient",
    ),
    ("first", 3): (
        {f"test_first_all_reduce_starts_before_backward_finishes[{cap}]" for cap in (1000, 3000)},
        "started after the last gradient was ready",
    ),
    ("first", 5): ({"test_bytes_on_the_wire_are_halved"}, "not bfloat16"),
    ("first", 6): ({"test_parameters_are_those_of_join_or_of_equal_work"}, "match neither fix"),
    ("first", 7): (
        {"test_every_epoch_visits_the_samples_in_a_new_order"},
        "in the same order in epochs 0 and 1",
    ),
    ("second", 1): (
        {f"test_every_rank_holds_the_sum[{p}]" for p in (2, 3, 4)}
        | {f"test_each_rank_sends_2_p_minus_1_over_p_of_the_tensor[{p}]" for p in (2, 3, 4)},
        "differs from dist.all_reduce's",
    ),
    ("second", 3): ({"test_a_bucket_holds_one_dtype"}, "a bucket's flat buffer has one dtype"),
    ("second", 4): ({"test_an_error_inside_no_sync_leaves_sync_on"}, "restore sync in `finally`"),
    ("second", 5): (
        {"test_result_is_within_bf16_rounding_of_the_float32_average"},
        "more than bfloat16 rounding",
    ),
    ("second", 7): ({"test_the_evaluation_counts_each_sample_once"}, "counted 12 samples"),
    # {"*"}: a defect that breaks training breaks every later check too; the first failure,
    # the message a learner reads, is the one that names it.
    ("third", 2): ({"*"}, "rank 1's embed.weight (frozen), embed.bias (frozen) differ"),
    ("third", 3): ({"*"}, "in __init__, broadcast rank 0's parameters, frozen ones too, and"),
    ("third", 5): (
        {"test_the_hook_reduces_over_the_group_it_is_given"},
        "`state` is the process group to reduce over",
    ),
    ("fourth", 2): (
        {
            "test_every_rank_steps_with_the_full_batch_gradient",
            "test_training_matches_the_full_batch_reference",
            "test_replicas_are_bit_identical",
        },
        "rank 0's gradient of heads.1.weight is None",
    ),
    ("fourth", 3): ({"*"}, "registered a hook on embed.weight, a frozen parameter"),
    ("fifth", 3): ({"*"}, "registered 2 hooks on middle.weight (tied to again.weight)"),
    ("sixth", 3): ({"*"}, "rank 1's shift (a buffer) differs from rank 0's"),
    ("seventh", 2): ({"*"}, "where .grad is None for heads.0.weight, heads.0.bias"),
    ("seventh", 3): ({"*"}, "put first.weight in no bucket"),
    ("eighth", 2): (
        {
            "test_every_rank_steps_with_the_full_batch_gradient",
            "test_training_matches_the_full_batch_reference",
        },
        "every gradient on rank 0 is 1/2 of the full-batch gradient",
    ),
    ("eighth", 3): ({"*"}, "put first.weight in no bucket"),
    ("first", 8): (RESUMES, "not bit-identical to the uninterrupted run"),
    ("second", 8): (RESUMES, "not bit-identical to the uninterrupted run"),
    ("third", 8): (
        {"test_a_rank_killed_mid_save_resumes_to_the_same_bits"},
        "killed halfway through checkpoint 6: torchrun exited with status 1",
    ),
    ("fourth", 8): ({"*"}, "rank 0 never wrapped its model in DistributedDataParallel"),
    ("fifth", 8): ({"*"}, "from one process training on the same whole batches"),
    ("sixth", 8): (RESUMES, "not bit-identical to the uninterrupted run"),
    ("first", 9): (
        {
            "test_each_rank_keeps_state_only_for_the_parameters_it_owns",
            "test_the_ranks_state_bytes_add_up_to_the_unsharded_optimizers",
        },
        "rank 0's optimizer keeps state for encode.bias, which rank 1 owns",
    ),
    ("second", 9): (
        {
            "test_replicas_are_bit_identical",
            "test_training_matches_unsharded_adam_on_the_whole_batch",
        },
        "each shard's owner must broadcast the updated parameters",
    ),
    ("third", 9): (
        {f"test_each_trainable_parameter_has_one_owner[{p}]" for p in (2, 3)},
        "encode.weight (tied to decode.weight) is in the shards 2 times (rank 0, rank 1)",
    ),
    ("fourth", 9): (
        {f"test_each_trainable_parameter_has_one_owner[{p}]" for p in (2, 3)},
        "rank 1's shard holds embed.weight (frozen)",
    ),
    ("fifth", 9): (
        {"test_training_matches_unsharded_adam_on_the_whole_batch"},
        "differs from unsharded Adam on the whole batch",
    ),
    ("sixth", 9): (
        {"test_the_shards_are_even[2]"},
        "rank 0's shard holds 201 of the model's 233 trainable elements",
    ),
}


@pytest.fixture(scope="module")
def mutants(tmp_path_factory):
    """Grade a set the first time a test asks for it: each test's time limit then covers
    one set's grading, not all six (exercise 8 alone runs three torchrun jobs per set)."""
    graded = {}

    def graded_set(name):
        if name not in graded:
            mutated = MUTANT_SETS[name]
            tmp = tmp_path_factory.mktemp(f"mutants-{name}")
            solved = [path.name for path in SOLUTIONS.glob("ex*.py")]
            folder = learner_folder(tmp / name, solved=solved, mutants=mutated)
            numbers = sorted(int(file[2]) for file in mutated)
            graded[name] = grade(tmp, folder, *map(str, numbers))[0]
        return graded[name]

    return graded_set


@pytest.mark.teeth
@pytest.mark.parametrize(("mutant_set", "number"), sorted(EXPECTED))
def test_breaking_a_claim_fails_exactly_its_check(mutants, mutant_set, number):
    failing, words = EXPECTED[mutant_set, number]
    row = mutants(mutant_set)[number]
    assert not row["solved"], f"exercise {number} passed with a broken solution"
    if failing != {"*"}:
        assert set(row["failed_tests"]) == failing
    assert words in row["first_failure"]


# The first line a learner reads names the cause, not one it was once mistaken for; `later`:
# words another failing check must say too (the grader reports every failing check).
FIRST_LINES = {
    # a sum where a mean belongs: no gradient is None, so no word of skipping one
    ("first", 2): {
        "names": ["2 times the full-batch gradient", "divide the sum by dist.get_world_size()"],
        "not": ["skipping a gradient that is None"],
    },
    ("eighth", 2): {
        "names": ["1/2 of the full-batch gradient", "divided by the world size twice"],
        "not": ["skipping a gradient that is None"],
    },
    # a gradient that is None given to all_reduce: torch's TypeError names no parameter
    ("seventh", 2): {
        "names": ["rank 1 raised TypeError in average_gradients", "heads.0.weight", "zeros"],
        "not": ["raised TypeError: Invalid function argument"],
    },
    # plan_buckets drops its last bucket: a dtype rule is not the cause
    ("seventh", 3): {
        "names": ["put first.weight in no bucket", "the last bucket"],
        "not": ["dtype"],
    },
    ("eighth", 3): {
        "names": ["put first.weight in no bucket", "the last bucket"],
        "not": ["dtype"],
        "later": ["rank 0's gradient of first.weight in step 0 was never reduced"],
    },
}


@pytest.mark.teeth
@pytest.mark.parametrize(("mutant_set", "number"), sorted(FIRST_LINES))
def test_the_first_line_names_the_cause(mutants, mutant_set, number):
    expected = FIRST_LINES[mutant_set, number]
    row = mutants(mutant_set)[number]
    first, later = row["first_failure"], "\n".join(row.get("failures", [])[1:])
    for words in expected["names"]:
        assert words in first, f"{words!r} is not in the first line: {first}"
    for words in expected["not"]:
        assert words not in first, f"{words!r} is in the first line: {first}"
    for words in expected.get("later", []):
        assert words in later, f"{words!r} is in no later failure:\n{later}"


# ---------------------------------------------------------------------------------------------
# The build's grading run reruns when any exercise file changes
# ---------------------------------------------------------------------------------------------
def exercises_run_spec():
    return dict(declared()["lab_runs"]["exercises"])


def exercises_archive_spec():
    return dict(declared()["archives"]["exercises"])


def exercises_run():
    return labrunner.LabRun("exercises", exercises_run_spec(), ROOT)


def test_the_grading_run_keys_on_every_exercise_file():
    keyed = set(exercises_run().input_files)
    wanted = {*EXERCISES.glob("*.py"), *SOLUTIONS.glob("*.py"), EXERCISES / "pytest.ini"}
    assert {path.resolve() for path in wanted} <= keyed


def test_an_edited_input_changes_the_key_and_a_glob_matching_nothing_fails(tmp_path):
    (tmp_path / "run.py").write_text("print('hi')\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("one\n")
    spec = {"script": "run.py", "inputs": ["data/*.txt"]}
    before = labrunner.LabRun("demo", spec, tmp_path).cache_key()
    (tmp_path / "data" / "a.txt").write_text("two\n")
    assert labrunner.LabRun("demo", spec, tmp_path).cache_key() != before
    without = labrunner.LabRun("demo", {"script": "run.py"}, tmp_path).cache_key()
    assert without != before
    missing = labrunner.LabRun("demo", {**spec, "inputs": ["nothing/*.py"]}, tmp_path)
    with pytest.raises(labrunner.LabError, match="matches no file"):
        missing.cache_key()


def test_a_solution_that_fails_fails_the_build_run(tmp_path):
    """The build's run, pointed at a copy whose exercise 2 solution forgets the mean."""
    folder = learner_folder(tmp_path / "copy")
    (folder / "solutions").mkdir()
    broken = (SOLUTIONS / "ex2_naive_data_parallel.py").read_text()
    broken = broken.replace("param.grad /= dist.get_world_size()", "pass")
    (folder / "solutions" / "ex2_naive_data_parallel.py").write_text(broken)
    spec = {**exercises_run_spec(), "script": "copy/grade.py", "args": ["--solutions", "2"]}
    spec.pop("inputs")
    with pytest.raises(labrunner.LabFailed, match="exited with status 1"):
        labrunner.execute(labrunner.LabRun("exercises", spec, tmp_path))


# ---------------------------------------------------------------------------------------------
# The page sections: each embeds its solution at build time, and no fence of theirs is a test
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scratch_chapter(tmp_path_factory):
    """A one-chapter site that includes every section the way docs/chapters/ pages do."""
    work = tmp_path_factory.mktemp("sections")
    shutil.copytree(EXERCISES, work / "exercises", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "docs" / "chapters").mkdir(parents=True)
    (work / "docs" / "failures.md").write_text("# Failure gallery\n")
    (work / "docs" / "glossary.md").write_text("# Glossary\n\n## Collectives\n")
    (work / "docs" / "chapters" / "05-launching.md").write_text(
        "# Launching\n\n### Elastic restarts, and what an elastic-ready script does\n"
    )
    includes = [f'--8<-- "exercises/pages/{page.name}"' for page in sorted(PAGES.glob("*.md"))]
    chapter = "# A chapter\n\n" + "\n\n".join(includes) + "\n"
    (work / "docs" / "chapters" / "chapter.md").write_text(chapter)
    config = {
        "site_name": "sections",
        "strict": True,
        "theme": {"name": "material"},
        "hooks": [str(ARCHIVES_HOOK)],
        "markdown_extensions": [
            "admonition",
            "pymdownx.details",
            "pymdownx.highlight",
            "pymdownx.superfences",
            {"pymdownx.snippets": {"base_path": ["."], "check_paths": True}},
        ],
        "extra": {"archives": {"exercises": exercises_archive_spec()}},
    }
    (work / "mkdocs.yml").write_text(yaml.safe_dump(config))
    proc = mkdocs_build(work / "mkdocs.yml", work / "site", work / "cache", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return work


def test_each_section_embeds_its_solution_verbatim(scratch_chapter):
    built = (scratch_chapter / "site" / "chapters" / "chapter" / "index.html").read_text()
    page = html.unescape(re.sub(r"<[^>]+>", "", built))
    for solution in sorted(SOLUTIONS.glob("ex*.py")):
        for line in solution.read_text().splitlines():
            assert line.strip() in page, f"{solution.name}: {line!r} is not on the page"
    assert "--8<--" not in page and "archive:exercises" not in page
    assert page.count("Download exercises.zip") == len(list(PAGES.glob("*.md")))


def test_no_fence_of_an_included_section_is_collected_as_a_test(scratch_chapter):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--markdown-docs", "--collect-only", "-q", "docs"],
        cwd=scratch_chapter,
        capture_output=True,
        text=True,
        timeout=pace.limit(60),
    )
    assert "no tests collected" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# ranks.py: what a learner sees when a rank raises, deadlocks, or is stuck outside torch
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ranks_module():
    spec = importlib.util.spec_from_file_location("ranks_under_test", EXERCISES / "ranks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def raise_on_rank_1(rank, world_size):
    if rank == 1:
        raise ValueError("rank 1's own mistake")
    import torch.distributed as dist

    dist.barrier()  # rank 0 waits for rank 1, which never comes


def stuck_outside_torch(rank, world_size):
    if rank == 0:
        time.sleep(60)
    return rank


def run_and_time(ranks_module, worker, **kwargs):
    before = set(pathlib.Path(tempfile.gettempdir()).glob("exercise-ranks-*"))
    started = time.monotonic()
    with pytest.raises(ranks_module.RankFailed) as failure:
        ranks_module.run_ranks(worker, 2, "the test's step", hang="a test hang", **kwargs)
    elapsed = time.monotonic() - started
    assert not multiprocessing.active_children(), "a rank outlived run_ranks"
    assert set(pathlib.Path(tempfile.gettempdir()).glob("exercise-ranks-*")) == before
    return str(failure.value), elapsed


def test_a_rank_that_raises_is_named_with_its_traceback(ranks_module):
    # The timeout bounds the group's start too, so it stretches with the machine (see below).
    message, _ = run_and_time(ranks_module, raise_on_rank_1, timeout_s=round(pace.limit(20)))
    assert message.splitlines()[0] == "rank 1 raised ValueError: rank 1's own mistake"
    assert "--- rank 1 ---\nTraceback" in message and 'raise ValueError("rank 1' in message


def test_a_rank_stuck_outside_torch_is_ended_after_the_grace(ranks_module):
    # The group's timeout also bounds its start: under load, gloo's first connection took
    # over 1 s and a rank failed there instead, so the timeout stretches with the machine.
    timeout_s = round(pace.limit(3))
    message, elapsed = run_and_time(ranks_module, stuck_outside_torch, timeout_s=timeout_s)
    grace = timeout_s + ranks_module.GRACE_S
    assert message.splitlines()[0] == (
        f"rank 0 was still running after {grace:g} s in the test's step: a test hang"
    )
    assert elapsed < 60  # ended by run_ranks, before the worker's 60 s sleep could end
