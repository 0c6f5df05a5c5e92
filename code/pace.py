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
DDP_COURSE_IMPORT_S, so that a whole run agrees on one number.
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
    started = time.perf_counter()
    if "torch" in sys.modules:
        # 3x what the slowest machine of our kind was seen to take, under load
        subprocess.run([sys.executable, "-c", "import torch"], check=True, timeout=60)
    else:
        import torch  # noqa: F401
    seconds = time.perf_counter() - started
    os.environ[ENV] = f"{seconds:.2f}"
    return seconds


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
