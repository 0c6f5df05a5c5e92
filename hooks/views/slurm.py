"""Views of the Slurm lab (code/clusters/slurm.py): one part of what it printed per marker, for
example `<!-- lab:slurm:slurm-requeue -->`, and the run's slurm.conf.
"""

from views.common import fence, folded, part_views

PARTS = "cluster ntasks torchrun srun squeue torchrun-result srun-result buffering requeue"


def conf(context):
    """The run's whole slurm.conf, folded: $TMP is the run's temporary folder."""
    body = fence("ini", context.result["slurm_conf"], "slurm.conf")
    return folded("The whole <code>slurm.conf</code> of this run", body)


VIEWS = {**part_views("slurm", PARTS.split()), "slurm-conf": conf}
