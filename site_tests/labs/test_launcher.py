"""code/launcher.py's spawn_ranks, run as a lab runs it: results in, one line out, nothing left.

A tiny script in a temp folder spawns two ranks with it. One run passes a file from a rank to
the parent through the run's directory; the other makes rank 1 raise. Each gets a TMPDIR of its
own, which must hold nothing of the run's afterwards.
"""

import os
import subprocess
import sys
import textwrap

from site_tests.conftest import ROOT, pace

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from launcher import spawn_ranks

    def worker(rank, world_size, run_dir, fail_rank):
        if rank == fail_rank:
            raise ValueError(f"rank {rank} of {world_size} refuses")
        with open(os.path.join(run_dir, f"rank{rank}.txt"), "w") as out:
            out.write(str(rank * 10))

    if __name__ == "__main__":
        with spawn_ranks(worker, 2, (int(sys.argv[1]),), "launcher-test-") as run_dir:
            print(sorted(open(os.path.join(run_dir, f"rank{r}.txt")).read() for r in range(2)))
    """
)


def run_script(tmp_path, fail_rank):
    script = tmp_path / "two_ranks.py"
    script.write_text(SCRIPT)
    tmpdir = tmp_path / f"tmp-{fail_rank}"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(ROOT / "code"))
    done = subprocess.run(
        [sys.executable, str(script), str(fail_rank)],
        capture_output=True,
        text=True,
        env=env,
        timeout=pace.limit(60),
    )
    # `import torch` alone may make torch's inductor cache folder; the run's own would differ
    return done, sorted(p.name for p in tmpdir.iterdir() if not p.name.startswith("torchinductor_"))


def test_ranks_hand_their_results_to_the_parent_and_leave_nothing(tmp_path):
    done, left = run_script(tmp_path, fail_rank=-1)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['0', '10']"
    assert left == []


def test_a_failed_rank_is_one_line_naming_it_and_its_error(tmp_path):
    done, left = run_script(tmp_path, fail_rank=1)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == "two_ranks.py: error: rank 1: ValueError: rank 1 of 2 refuses"
    assert done.stdout == ""
    assert left == []
