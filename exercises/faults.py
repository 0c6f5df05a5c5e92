"""Run a training script under torchrun with one fault injected, for exercise 8's tests.

    FAULT=kill:1:6 torchrun --nproc_per_node=2 --max_restarts=1 faults.py SCRIPT ARGS...

runs SCRIPT ARGS on every rank as torchrun would, with torch patched in three places. FAULT
says what goes wrong, in the first attempt only (TORCHELASTIC_RESTART_COUNT=0):

    kill:RANK:STEP   rank RANK is killed with SIGKILL right after its optimizer's STEP-th step
    torn:RANK:SAVE   rank RANK is killed halfway through writing its SAVE-th torch.save: the
                     first half of the bytes reach the file, then SIGKILL

With or without a fault, every rank reports on stdout, as `@@` JSON lines that the tests read:
{"event": "ddp"} when it builds a DistributedDataParallel, and {"event": "step", "rows": N}
after each optimizer step, N the examples its DDP forward passes took since the last step.
The script itself is left unchanged; like ranks.py, you do not need to read this file.
"""

import functools
import io
import json
import os
import runpy
import signal
import sys

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook

RANK = int(os.environ["RANK"])
RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
KIND, FAULT_RANK, AT = (os.environ.get("FAULT") or "none:-1:0").split(":")
ARMED = RESTART == 0 and int(FAULT_RANK) == RANK
counts = {"rows": 0, "steps": 0, "saves": 0}


def report(event, **fields):
    line = {"event": event, "rank": RANK, "restart": RESTART, **fields}
    sys.stdout.write("@@ " + json.dumps(line) + "\n")  # one write: the ranks share stdout
    sys.stdout.flush()


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def built_ddp(init):
    @functools.wraps(init)
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        report("ddp")

    return wrapped


def counted_forward(forward):
    @functools.wraps(forward)
    def wrapped(self, *inputs, **kwargs):
        counts["rows"] += len(inputs[0])
        return forward(self, *inputs, **kwargs)

    return wrapped


def after_step(optimizer, args, kwargs):
    counts["steps"] += 1
    report("step", rows=counts["rows"])
    counts["rows"] = 0
    if ARMED and KIND == "kill" and counts["steps"] == int(AT):
        die()


def torn_save(save):
    @functools.wraps(save)
    def wrapped(obj, f, *args, **kwargs):
        counts["saves"] += 1
        if not (ARMED and KIND == "torn" and counts["saves"] == int(AT)):
            return save(obj, f, *args, **kwargs)
        whole = io.BytesIO()
        save(obj, whole, *args, **kwargs)
        half = whole.getvalue()[: len(whole.getvalue()) // 2]
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as file:
                file.write(half)
        else:
            f.write(half)
            f.flush()
        die()

    return wrapped


DistributedDataParallel.__init__ = built_ddp(DistributedDataParallel.__init__)
DistributedDataParallel.forward = counted_forward(DistributedDataParallel.forward)
register_optimizer_step_post_hook(after_step)
torch.save = torn_save(torch.save)

if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
