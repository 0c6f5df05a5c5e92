"""Run a DDP lab with one rank made to fail, for the tests; the lab's script stays as it is.

    python site_tests/tools/lab_faults.py crash:1 code/ddp/gloo.py --world-size 2
    python site_tests/tools/lab_faults.py skip:1 code/ddp/gloo.py --timeout 8

    crash:RANK   rank RANK raises RuntimeError("injected fault: ...") just before training
    skip:RANK    rank RANK skips the replica check: it never arrives at the 'replicas'
                 checkpoint and leaves out that phase's all_gather, so the others wait for it

How the fault reaches the ranks. The lab starts its ranks as new interpreters (mp.spawn), as
forks of a forkserver that is itself a new interpreter, or torchrun starts them; none of them
inherits a patch made in this process, but all of them inherit its environment. So this
runner puts the fault in LAB_FAULT and the folder lab_faults_site/ at the front of PYTHONPATH,
then replaces itself with `python SCRIPT ARGS` (exec: same process, so a caller's pid, pipes and
timeout still apply to the lab). Python imports sitecustomize.py from that folder at the start
of every interpreter, and it calls arm() below: from then on, the first `import ddp_common` in
that process is followed by the patches. They wrap three functions of ddp_common, the module the
labs share, and each wrapper asks at call time which rank it runs on, so the same patches serve
the launching process, the forkserver and every rank, whatever the launcher.
"""

import functools
import importlib.abc
import importlib.util
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
HOOK = HERE / "lab_faults_site"  # holds the sitecustomize.py that calls arm()
KINDS = ("crash", "skip")
SKIPPED_PHASE = "replicas"


def parse(text):
    """'crash:1' -> ('crash', 1); anything else is refused with the accepted forms."""
    kind, _, rank = text.partition(":")
    if kind not in KINDS or not rank.isdigit():
        raise ValueError(f"a fault is crash:RANK or skip:RANK, not {text!r}")
    return kind, int(rank)


# ---------------------------------------------------------------------------------------------
# The patches, applied to ddp_common in every process that imports it
# ---------------------------------------------------------------------------------------------
def crash_before_training(train_variants, faulty):
    @functools.wraps(train_variants)
    def wrapped(rank, *args, **kwargs):
        if rank == faulty:
            raise RuntimeError(f"injected fault: rank {rank} crashed before training")
        return train_variants(rank, *args, **kwargs)

    return wrapped


def skip_checkpoint(call, faulty):
    @functools.wraps(call)
    def wrapped(self, phase):
        if self.rank == faulty and phase == SKIPPED_PHASE:
            return None  # never arrives: the others wait here until their timeout
        return call(self, phase)

    return wrapped


def skip_replica_check(replicas_identical, faulty):
    @functools.wraps(replicas_identical)
    def wrapped(flat):
        import torch.distributed as dist  # imported by the lab long before this runs

        if dist.get_rank() == faulty:
            return None  # no all_gather: a skipped phase calls none of its collectives
        return replicas_identical(flat)

    return wrapped


def install(lab, fault):
    kind, rank = fault
    if kind == "crash":
        lab.train_variants = crash_before_training(lab.train_variants, rank)
    else:
        lab.Checkpoints.__call__ = skip_checkpoint(lab.Checkpoints.__call__, rank)
        lab.replicas_identical = skip_replica_check(lab.replicas_identical, rank)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds ddp_common as the next finder would, and installs the fault once it has run."""

    def __init__(self, fault):
        self.fault = fault

    def find_spec(self, name, path=None, target=None):
        if name != "ddp_common":
            return None
        sys.meta_path.remove(self)  # once is enough, and find_spec below must not find us
        spec = importlib.util.find_spec(name)
        if spec is None:  # no ddp_common on the path: the import fails as it would have
            return None
        execute = spec.loader.exec_module

        def execute_then_install(module):
            execute(module)
            install(module, self.fault)

        spec.loader.exec_module = execute_then_install
        return spec


def arm(text):
    """Called by lab_faults_site/sitecustomize.py at the start of every interpreter."""
    sys.meta_path.insert(0, PatchOnImport(parse(text)))


# ---------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------
def main(argv):
    if len(argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} crash:RANK|skip:RANK SCRIPT [ARGS...]")
    fault, script, *args = argv
    try:
        parse(fault)
    except ValueError as err:
        sys.exit(f"{sys.argv[0]}: {err}")
    path = [str(HOOK), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, LAB_FAULT=fault, PYTHONPATH=os.pathsep.join(path))
    os.execve(sys.executable, [sys.executable, script, *args], env)


if __name__ == "__main__":
    main(sys.argv[1:])
