"""Views of the two-node lab (code/26_two_nodes.py): one part of what it printed per marker.

The lab prints one block per part, each opened by a line `== PART ==`; a page embeds a part
where it explains it, for example `<!-- lab:two-nodes:nodes-restart -->`.
"""

import re

from lab_views import fence, view
from mkdocs.exceptions import PluginError

PARTS = ("train", "restart", "trap", "store")


def part(stdout, name):
    """The lines of block `name`, without its header."""
    blocks = dict(re.findall(r"^== (\w+) ==\n(.*?)(?=^== |\Z)", stdout, re.MULTILINE | re.DOTALL))
    if name not in blocks:
        raise PluginError(f"two-node lab record has no `== {name} ==` block")
    return blocks[name]


def register(name):
    @view(f"nodes-{name}")
    def show(context):
        where = (
            "recorded" if context.run.recorded is not None else "printed when this site was built"
        )
        title = f"{name}: {where} ({context.record['started_utc']})"
        return fence("text", part(context.record["stdout"], name), title)


for _name in PARTS:
    register(_name)
