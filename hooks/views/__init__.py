"""Views: the Markdown (and figures) a page shows for a marker on a line of its own.

    <!-- lab:NAME:VIEW -->   a view of lab run NAME's record (what hooks/labs.py stores for one
                             run: the command, what it printed, its --json result and its
                             provenance); every number a view shows is read from a record
    <!-- figure:NAME -->     a drawing made from code alone

Each module of this package is one family of views and exposes them as plain tables: VIEWS
{name: view(context)}, DRAWINGS {name: drawing()}, FIGURES [common.Figure] (image files made
from a record). Importing a module registers nothing; this file assembles the one registry
from the explicit list FAMILIES below, and a name that two families claim fails the build.

    common     the context a view gets, fences, folds, a report's `== PART ==` blocks
    generic    command, stdout, provenance: the views every lab has
    source     the lab's code, the sections its run declares `shown_first` first
    ddp        the gloo and NCCL labs' tables and the all_reduce sweep figure (matplotlib)
    kit        the figure kit every drawn (inline SVG) figure uses
    ring, overlap, figures_ddp, figures_launch, figures_scale   drawn figures, by chapter
    past_ddp, two_nodes, slurm   parts of the chapter 8, two-node and Slurm labs' reports
"""

import hashlib
import pathlib
import posixpath
import re

from mkdocs.exceptions import PluginError

from views import (
    ddp,
    figures_ddp,
    figures_launch,
    figures_scale,
    generic,
    overlap,
    past_ddp,
    ring,
    slurm,
    source,
    two_nodes,
)

# Where a page embeds a view: on a line of its own. hooks/labs.py replaces each one;
# hooks/error_index.py finds the runs whose output (view `stdout`) a page shows.
MARKER = re.compile(r"^<!-- lab:(?P<run>[\w-]+):(?P<view>[\w-]+) -->$", re.MULTILINE)
# Figures drawn from code alone, by name: `<!-- figure:NAME -->` on a line of its own.
FIGURE_MARKER = re.compile(r"^<!-- figure:(?P<name>[\w-]+) -->$", re.MULTILINE)

FAMILIES = [
    generic,
    source,
    ddp,
    ring,
    overlap,
    figures_ddp,
    figures_launch,
    figures_scale,
    past_ddp,
    two_nodes,
    slurm,
]


def table(families, kind):
    """One {name: function} of every family's `kind` table (VIEWS or DRAWINGS).

    A name claimed twice fails: otherwise the family listed last would silently win.
    """
    merged, owner = {}, {}
    for family in families:
        for name, function in getattr(family, kind, {}).items():
            if name in merged:
                raise PluginError(
                    f"{kind} {name!r} is registered by both {owner[name]} and {family.__name__}"
                )
            merged[name], owner[name] = function, family.__name__
    return merged


VIEWS = table(FAMILIES, "VIEWS")
DRAWINGS = table(FAMILIES, "DRAWINGS")
FIGURES = [figure for family in FAMILIES for figure in getattr(family, "FIGURES", [])]


def render(name, context):
    if name not in VIEWS:
        raise PluginError(f"{context.page_uri}: unknown lab view {name!r} (known: {sorted(VIEWS)})")
    if context.record is None and name not in ("command", "source"):
        # Say it once, where the provenance would be; the other views have nothing to show.
        return generic.not_recorded(context) if name == "provenance" else ""
    return VIEWS[name](context)


def render_drawings(markdown, page_uri):
    def replace(match):
        if match["name"] not in DRAWINGS:
            known = sorted(DRAWINGS)
            raise PluginError(f"{page_uri}: unknown figure {match['name']!r} (known: {known})")
        return DRAWINGS[match["name"]]()

    return FIGURE_MARKER.sub(replace, markdown)


def artifacts(name, record, cache):
    """Files a record contributes to the site, {uri: bytes}, from every registered figure maker.

    A figure is cached beside the lab records under a key of the record and the makers' code,
    so an unchanged build renders nothing and imports no plotting library.
    """
    source.SHOWN_ON_PAGE.clear()  # a new build: no page has embedded anything yet
    if record is None:
        return {}
    files = {}
    for maker in FIGURES:
        if not maker.applies(record["result"]):
            continue
        uri = maker.uri(name)
        digest = hashlib.sha256(record["key"].encode() + name.encode())
        digest.update(pathlib.Path(maker.render.__code__.co_filename).read_bytes())
        cached = cache / f"figure-{digest.hexdigest()[:16]}-{posixpath.basename(uri)}"
        if not cached.is_file():
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_bytes(maker.render(record["result"]))
        files[uri] = cached.read_bytes()
    return files
