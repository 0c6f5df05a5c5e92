"""How fast this machine is: one measurement, and every time limit in the course derived from it.

    python code/pace.py            # this machine's import time, its factor, a few limits
    DDP_COURSE_IMPORT_S=6 python3 -m nox -s tests   # rehearse a machine three times slower

Machines of one kind are not one speed: a fresh `import torch` takes under 2 s on some and over
4 s on others, and a busy neighbour doubles either. A limit written as a bare number of seconds
is then too tight on one (a healthy run is killed) or needlessly loose on another. So every
limit in the course (a lab's timeout, a failure script's deadline, a test's patience) is written
for a reference machine, where a fresh `import torch` takes REFERENCE_IMPORT_S, and `limit()`
stretches it by how much slower this machine is. A faster machine keeps the written limit. No
machine stretches a limit more than MAX_FACTOR times, so a hang that a limit of 15 s catches on
the reference machine still ends within about a minute anywhere.

The measurement is taken once per run, by whatever starts first (a build, a test session, a
script started by hand), and handed to every process it starts through the environment variable
DDP_COURSE_IMPORT_S, so that a whole run agrees on one number. Runs started side by side (the
two halves of `nox -s tests`, the two releases of `nox -s older-releases`) share one
measurement, stretched by their number (`side_by_side`): taken as they start, it cannot see the
load they put on one another once they are under way.
"""

import os
import subprocess
import sys
import time

ENV = "DDP_COURSE_IMPORT_S"
REFERENCE_IMPORT_S = 2.0  # seconds: the machines the limits were written on took 1.7-2.6 s
MAX_FACTOR = 5.0


def import_seconds():
    """Seconds a fresh `import torch` takes on this machine, measured once per run.

    From the environment if a parent measured it already; else timed now, and put into the
    environment for every process started from here on. A process that has not imported torch
    yet times its own import (a script about to import torch pays nothing extra); one that has,
    times a fresh interpreter.
    """
    if given := os.environ.get(ENV):
        return float(given)
    if "torch" in sys.modules:
        seconds = fresh_import_seconds(sys.executable)
    else:
        started = time.perf_counter()
        import torch  # noqa: F401

        seconds = time.perf_counter() - started
    os.environ[ENV] = f"{seconds:.2f}"
    return seconds


def fresh_import_seconds(python, together=1):
    """Seconds `import torch` takes in fresh interpreters, `python`, `together` started at once
    (until the last one is done)."""
    started = time.perf_counter()
    imports = [subprocess.Popen([python, "-c", "import torch"]) for _ in range(together)]
    for each in imports:
        # 3x what the slowest machine of our kind was seen to take, under load
        if each.wait(timeout=60) != 0:
            raise subprocess.CalledProcessError(each.returncode, each.args)
    return time.perf_counter() - started


def side_by_side(runs, python):
    """The environment for `runs` runs about to start side by side: one measurement for all,
    times `runs`, as each will have about a `runs`-th of the machine it was measured on.

    The measurement is this run's, else `runs` fresh imports in `python` at once: one alone
    would find a free core beside a busy one, and miss the load the runs will share.
    """
    if ENV in os.environ:
        seconds = float(os.environ[ENV])
    else:
        seconds = fresh_import_seconds(python, together=runs)
    return {ENV: f"{runs * seconds:.2f}"}


def factor():
    """How many times slower than the reference machine this one is, between 1 and MAX_FACTOR."""
    return min(max(import_seconds() / REFERENCE_IMPORT_S, 1.0), MAX_FACTOR)


def limit(seconds):
    """A limit written for the reference machine, stretched for this one (in seconds)."""
    return seconds * factor()


if __name__ == "__main__":
    print(f"import torch: {import_seconds():.2f} s (reference {REFERENCE_IMPORT_S:g} s)")
    print(f"factor: {factor():.2f} (at most {MAX_FACTOR:g})")
    for written in (2, 15, 60, 120):
        print(f"a limit written as {written:>3} s is {limit(written):6.1f} s here")
