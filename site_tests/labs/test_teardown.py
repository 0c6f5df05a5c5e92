"""Chapter 4's exit trap: torch._dynamo imported after the group keeps gloo's threads alive.

On each release in the matrix: two gloo ranks all-reduce, destroy the group, and report the
gloo threads still running after a short grace (gloo's own loop thread may end a moment after
the call). With torch._dynamo first imported after init_process_group (as the first DDP or
torch.optim use imports it), the threads survive destroy_process_group; imported before, they
are gone. The labs that form a group import it first (test_first_job.py checks
that chapter 1's script has no gloo thread left when its interpreter starts to exit).
"""

import ast
import json
import os
import subprocess
import sys

import pytest

from site_tests.conftest import ROOT, pace

# One rank; gloo_threads.py, on its PYTHONPATH, lists the threads.
PROBE = """
import json, os, sys
import torch
from gloo_threads import gloo_threads_after
order, store, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
if order == "before":
    import torch._dynamo
import torch.distributed as dist
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
if order == "after":
    import torch._dynamo
total = torch.ones(1)
dist.all_reduce(total)
dist.destroy_process_group()
print(json.dumps(gloo_threads_after(float(sys.argv[4]))), flush=True)
os._exit(0)  # the probe reports the threads; it does not gamble on the abort itself
"""


def gloo_threads_after_destroy(tmp_path, order):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    store = tmp_path / f"store-{order}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "site_tests" / "tools"))
    ranks = [
        subprocess.Popen(
            [sys.executable, str(probe), order, str(store), str(rank), str(pace.limit(2))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in (0, 1)
    ]
    reports = []
    for proc in ranks:
        out, err = proc.communicate(timeout=round(pace.limit(30)))
        assert proc.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


@pytest.mark.timeout(120)
def test_dynamo_imported_after_the_group_keeps_gloo_threads_past_destroy(tmp_path):
    after = gloo_threads_after_destroy(tmp_path, "after")
    assert all("pt_gloo_runloop" in threads for threads in after), after
    before = gloo_threads_after_destroy(tmp_path, "before")
    assert before == [[], []], before


# The scripts that form a group and end through the interpreter's teardown (the others leave
# with os._exit: launcher.exit_now in the labs' spawned ranks and the gallery; exercises/ranks.py's
# forked ranks inherit torch._dynamo from their parent).
SCRIPTS = [
    "code/first_job/train_ddp.py",
    "code/clusters/elastic_train.py",
    "code/ddp/ddp_overlap.py",
    "exercises/solutions/ex8_convert_your_script.py",
]


def dynamo_imported_before_the_group(source):
    """True if `import torch._dynamo` comes before the first init_process_group call."""
    tree = ast.parse(source)
    imports = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Import) and any(a.name == "torch._dynamo" for a in node.names)
    ]
    inits = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "init_process_group"
    ]
    return bool(imports and inits) and min(imports) < min(inits)


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_imports_dynamo_before_its_group(script):
    assert dynamo_imported_before_the_group((ROOT / script).read_text())


def test_the_order_check_rejects_a_late_import():
    group = "import torch.distributed as dist\ndist.init_process_group('gloo')\n"
    assert not dynamo_imported_before_the_group(group + "import torch._dynamo\n")
    assert not dynamo_imported_before_the_group(group)
    assert dynamo_imported_before_the_group("import torch._dynamo\n" + group)
