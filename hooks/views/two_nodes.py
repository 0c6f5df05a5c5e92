"""Views of the two-node lab (code/clusters/two_nodes.py): one part of what it printed per marker,
for example `<!-- lab:two-nodes:nodes-restart -->`.
"""

from views.common import part_views

VIEWS = part_views("nodes", ["train", "restart", "trap", "store"])
