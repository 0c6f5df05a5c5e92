"""Where a Flight Recorder dump goes when TORCH_FR_DUMP_TEMP_FILE is unset (chapter 6).

The prefix is fixed at a process's first dump, so the default can only be seen in a fresh
interpreter: chapter 6's "How we know" fence checks the named prefix in its own process, and
this module checks the default, `~/.cache/torch/comm_lib_trace_rank_<rank>`, and that
XDG_CACHE_HOME takes the place of `~/.cache`. The dump call for a gloo group is new in 2.15.
"""

import os
import subprocess
import sys

import pytest

from site_tests.conftest import pace
from site_tests.tools.fence_plugin import expected_release

pytestmark = pytest.mark.skipif(
    expected_release() < (2, 15), reason="no dump call for a gloo group before 2.15"
)

DUMP = """
import torch, torch.distributed as dist
from torch._C import _distributed_c10d as c10d
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
try:
    dist.all_reduce(torch.ones(4))
    c10d._dump_fr_trace_file(0, True, False, False)
finally:
    dist.destroy_process_group()
"""


def test_unset_prefix_dumps_into_torchs_cache_folder(tmp_path):
    """Two fresh interpreters side by side: HOME alone, then XDG_CACHE_HOME as well."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_FR")}
    env.pop("XDG_CACHE_HOME", None)
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    cases = {
        home / ".cache" / "torch": {**env, "HOME": str(home)},
        xdg / "torch": {**env, "HOME": str(home / "unused"), "XDG_CACHE_HOME": str(xdg)},
    }
    runs = [
        subprocess.Popen([sys.executable, "-c", DUMP], env=case, stderr=subprocess.PIPE)
        for case in cases.values()
    ]
    try:
        errors = [proc.communicate(timeout=pace.limit(60))[1] for proc in runs]
    finally:
        for proc in runs:
            proc.kill()
            proc.communicate()
    for proc, err in zip(runs, errors, strict=True):
        assert proc.returncode == 0, err.decode()[-2000:]
    for folder in cases:
        dumped = sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []
        assert dumped == ["comm_lib_trace_rank_0"], f"{folder}: {dumped}"
    assert not (home / "unused").exists(), "XDG_CACHE_HOME set: nothing under HOME"
