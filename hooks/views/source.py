"""The source view, `<!-- lab:NAME:source -->`: a lab's code, the part a reader came for first.

What a page shows first is declared with the run in mkdocs.yml, never guessed from the code:

    gloo:
      script: code/ddp/gloo.py
      shown_first:  # module the script imports: title of its `# ----` banner section
        code/ddp/ddp_common.py: "Training: one loop, three ways to keep replicas in step"

A declared module that the script does not import, or a section title it does not have, fails
the build (hooks/labs.py checks every run's declaration when the build starts).
"""

import re

from mkdocs.exceptions import PluginError

from views.common import NOT_SEARCHED, fence, folded


def source_view(context):
    """The declared sections first, then the script and the modules it imports, folded.

    What a reader came for is the data-parallel code; what surrounds it (arguments, launching,
    fault injection, checkpoints) exists for the tests. So the sections the run's `shown_first:`
    names are shown first, and the script is folded after them; a run that declares none shows
    its script first. A module that an earlier script on the same page already embedded is
    linked to, not embedded again; the machinery around the labs (MACHINERY) is offered for
    download only.
    """
    script = context.run.script
    helpers = [path for path in context.run.sources if path != script]
    shown = SHOWN_ON_PAGE.setdefault(context.page_uri, set())

    def relative(path):
        return path.relative_to(context.root).as_posix()

    def download(path):
        return f"[`{relative(path)}`]({context.link(relative(path))}){{: download }}"

    shown_helpers = [path for path in helpers if relative(path) not in MACHINERY]

    text = f"Download {download(script)}"
    if helpers:
        text += ", and the modules it imports, which keep these paths under `code/`: "
        text += ", ".join(download(path) for path in helpers)
    code = context.root / "code"
    if started := [p for p in context.run.input_files if p.is_relative_to(code)]:
        text += "; it also runs " + ", ".join(download(path) for path in started)
        text += ", which keep their paths too" if len(started) > 1 else ", which keeps its path too"
    text += ".\n\n"
    first = context.shown_first
    for path, title, body in first:
        text += fence("python", body, f"{relative(path)}: {title}") + "\n"
    script_fence = fence("python", script.read_text(encoding="utf-8"), relative(script))
    text += folded(relative(script), script_fence) if first else script_fence
    again = []
    for path in shown_helpers:
        if path in shown:
            again.append(path)
            continue
        shown.add(path)
        listing = path.read_text(encoding="utf-8")
        for section_path, title, section in first:
            if section_path == path:  # shown in full above: once is enough for the page
                listing = listing.replace(section, f"# ({title}: shown above.)")
        body = fence("python", listing, relative(path))
        text += folded(relative(path), body, anchor=source_anchor(relative(path)))
    if again:
        links = ", ".join(
            f"[`{relative(path)}`](#{source_anchor(relative(path))})" for path in again
        )
        text += f"\nIt also imports {links}, shown with an earlier script on this page.\n"
    return f'<div markdown="1" {NOT_SEARCHED}>\n\n{text}\n</div>\n'


# What every lab imports to be run, timed and recorded, and the failure gallery's harness: the
# machinery around a lab, which a reader downloads with it but does not study. Shown in full, the
# three modules and the harness took about 70 KB of the gallery page's 345 KB.
MACHINERY = {
    "code/pace.py",
    "code/provenance.py",
    "code/lab_cli.py",
    "code/launcher.py",
    "code/failures/harness.py",
}


# Which project modules each page has embedded so far in this build: {page uri: {path}}.
# artifacts() runs for every lab at the start of each build, before any page, and resets it.
SHOWN_ON_PAGE = {}
BANNER = re.compile(r"^# -{20,}\n# (?P<title>.+)\n# -{20,}\n", re.MULTILINE)


def banner_sections(source):
    """(title, code) for each section a `# ----` / `# Title` / `# ----` banner opens."""
    marks = list(BANNER.finditer(source))
    ends = [mark.start() for mark in marks[1:]] + [len(source)]
    return [
        (mark["title"].strip(), source[mark.end() : end].strip("\n"))
        for mark, end in zip(marks, ends, strict=False)  # no banner: no section
    ]


def source_anchor(relative_path):
    return "source-" + re.sub(r"[^a-z0-9]+", "-", relative_path.lower()).strip("-")


def shown_first(run, declared):
    """(path, title, code) of each section the run's `shown_first:` names, in declared order.

    `declared` maps a module the script imports to the title of one of its banner sections;
    a module or a title that is not there fails the build, naming what there is.
    """
    if not isinstance(declared, dict):
        raise PluginError(f"lab run {run.name!r}: shown_first must map a module to a section")
    imported = {
        path.relative_to(run.root).as_posix(): path for path in run.sources if path != run.script
    }
    sections = []
    for module, title in declared.items():
        if module not in imported:
            raise PluginError(
                f"lab run {run.name!r}: shown_first names {module!r}, which its script does "
                f"not import (it imports: {', '.join(sorted(imported)) or 'no project module'})"
            )
        found = dict(banner_sections(imported[module].read_text(encoding="utf-8")))
        if title not in found:
            raise PluginError(
                f"lab run {run.name!r}: shown_first names section {title!r} of {module}, "
                f"which has no such `# ----` banner (its sections: {'; '.join(found) or 'none'})"
            )
        sections.append((imported[module], title, found[title]))
    return sections


VIEWS = {"source": source_view}
