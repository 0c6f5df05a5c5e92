"""What every view builds with: the context a view is called with, fences, folds, the parts
of a lab's report, and the sizes every figure is held to.
"""

import dataclasses
import functools
import posixpath
import re

from mkdocs.exceptions import PluginError


@dataclasses.dataclass
class Context:
    run: object  # labs.LabRun
    record: dict | None  # None: a recorded run that has not been recorded yet
    page_uri: str
    # What the run's `shown_first:` declaration names: (path, title, code) of each section the
    # source view shows before the script (views/source.py's shown_first reads them).
    shown_first: list = dataclasses.field(default_factory=list)

    @property
    def root(self):
        """The project root, where the run's paths are relative to."""
        return self.run.root

    @property
    def result(self):
        return self.record["result"]

    def link(self, uri):
        """`uri` (relative to the site root) as a link relative to this page."""
        return posixpath.relpath(uri, posixpath.dirname(self.page_uri) or ".")


def fence(language, body, title=None):
    attributes = f' title="{title}"' if title else ""
    return f"```{language}{attributes}\n{body.rstrip()}\n```\n"


def folded(summary, body, anchor=None):
    where = f' id="{anchor}"' if anchor else ""
    return (
        f'\n<details class="quote"{where} markdown="1" {NOT_SEARCHED}>\n'
        f"<summary>{summary}</summary>\n\n{body}\n</details>\n"
    )


# Material's search skips elements carrying this attribute (each must carry it: a <details>
# inside an excluded <div> is indexed again). Source code would double the search index, and
# search finds the prose that explains the code.
NOT_SEARCHED = 'data-search-exclude="true"'


def machine(result):
    """Where a run ran, in a few words: its GPUs if it used any, else its CPU."""
    if gpu := result.get("gpu"):
        return f"{gpu['count']}× {gpu['model']}"
    env = result["env"]
    return f"{env['cpu_model']} ({env['cpu_count']} cores)"


# A lab that prints its report in parts opens each with a line `== PART ==` (the two-node and
# Slurm labs); a page embeds one part where it explains it.
PART = re.compile(r"^== ([\w-]+) ==\n(.*?)(?=^== |\Z)", re.MULTILINE | re.DOTALL)


def part_views(prefix, parts):
    """{PREFIX-PART: view} for each of `parts`: the view of that block of the run's output."""
    return {f"{prefix}-{name}": functools.partial(part_view, name) for name in parts}


def part_view(name, context):
    """Block `name` of the run's output, as a text fence titled with where it ran."""
    blocks = dict(PART.findall(context.record["stdout"]))
    if name not in blocks:
        raise PluginError(f"lab run {context.run.name!r}: no `== {name} ==` block in its record")
    where = "recorded" if context.run.recorded is not None else "printed when this site was built"
    return fence("text", blocks[name], f"{name}: {where} ({context.record['started_utc']})")


# The smallest text a figure may render at, in CSS pixels, on any screen, and the width of
# the content column on a 390 px phone.
LEGIBLE_PX, PHONE_COLUMN_PX = 11, 358


@dataclasses.dataclass(frozen=True)
class Figure:
    """A figure made from a record: where it goes, which records have one, how to draw it."""

    uri: object  # run name -> site URI
    applies: object  # result -> bool
    render: object  # result -> bytes
