"""The gloo threads a process still runs; imported by the processes under test, not by pytest.

torch names its gloo threads pt_gloo_runloop, and gloo names its own gloo_tcp_loop. A freed
group's threads end as destroy_process_group returns, gloo's own loop a moment later: hence
the grace, so that what is left after it is what outlives the group.
"""

import contextlib
import pathlib
import time


def gloo_threads():
    # /proc by hand: psutil lists a process's threads by id and times, without their names.
    names = []
    for task in pathlib.Path("/proc/self/task").iterdir():
        # A thread that ends as we look is no thread left.
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            names.append((task / "comm").read_text().strip())
    return sorted(name for name in names if "gloo" in name)


def gloo_threads_after(grace_s):
    deadline = time.monotonic() + grace_s
    while gloo_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    return gloo_threads()
