"""Views of the Slurm lab (code/clusters/slurm.py): one part of what it printed per marker, for
example `<!-- lab:slurm:slurm-requeue -->`, and the run's slurm.conf.
"""

from lab_views import fence, folded, part_views, view

PARTS = "cluster ntasks torchrun srun squeue torchrun-result srun-result buffering requeue"
part_views("slurm", PARTS.split())


@view("slurm-conf")
def conf(context):
    """The run's whole slurm.conf, folded: $TMP is the run's temporary folder."""
    body = fence("ini", context.result["slurm_conf"], "slurm.conf")
    return folded("The whole <code>slurm.conf</code> of this run", body)
