"""Views of the Slurm lab (code/27_slurm.py): one block of what it printed per marker.

The lab prints one block per part, each opened by a line `== PART ==`; a page embeds a part
where it explains it, for example `<!-- lab:slurm:slurm-requeue -->`.
"""

import re

from lab_views import fence, folded, view
from mkdocs.exceptions import PluginError

PARTS = (
    *("cluster", "torchrun", "srun", "ntasks", "squeue", "torchrun-result", "srun-result"),
    *("buffering", "requeue"),
)


def part(stdout, name):
    """The lines of block `name`, without its header."""
    pattern = r"^== ([\w-]+) ==\n(.*?)(?=^== |\Z)"
    blocks = dict(re.findall(pattern, stdout, re.MULTILINE | re.DOTALL))
    if name not in blocks:
        raise PluginError(f"Slurm lab record has no `== {name} ==` block")
    return blocks[name]


def register(name):
    @view(f"slurm-{name}")
    def show(context):
        where = (
            "recorded" if context.run.recorded is not None else "printed when this site was built"
        )
        title = f"{name}: {where} ({context.record['started_utc']})"
        return fence("text", part(context.record["stdout"], name), title)


for _name in PARTS:
    register(_name)


@view("slurm-conf")
def conf(context):
    """The run's whole slurm.conf, folded: $TMP is the run's temporary folder."""
    body = fence("ini", context.result["slurm_conf"], "slurm.conf")
    return folded("The whole <code>slurm.conf</code> of this run", body)
