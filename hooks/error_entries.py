"""The error index's entries: torch's message, where it came from, and who hit it.

code/errors/corpus.yml holds, for every error the index explains, the threads where people
pasted it (address, the line as posted, what the thread settled on) and how this site shows
the message, one of
- `printed: live`: code/errors/reproduce.py makes it happen in every build, and the page shows
  what torch printed there;
- `printed: lab` with `run: NAME`: another lab run prints it (chapter 5's stall lab, on a host
  whose name does not resolve), and the page shows the first line of its output that matches
  the entry's `expect`;
- `printed: quoted`: it needs CUDA, NCCL or a second machine, so the page quotes torch's own
  files for the pinned release, and says so.

An entry is a section of a page under docs/errors/, written by a person: a heading in the
message's own words, a marker, then the cause, the fix and a link to the chapter that explains
the mechanism:

    ### Default process group has not been initialized

    <!-- error: default-group-uninitialized -->

The marker becomes the message in a block the search indexes (hooks/search_scope.py leaves it
in), a line saying where the text came from, and the threads. Every id in the corpus has exactly
one marker in the pages, and every marker an id in the corpus: either mistake fails the build.
"""

import pathlib
import re

import yaml
from error_index import matcher
from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!-- error: (?P<id>[\w-]+) -->$", re.M)
LIVE_RUN = "errors"  # mkdocs.yml's lab run of code/errors/reproduce.py
REPRODUCE = "code/errors/reproduce.py"


def load_corpus(root):
    """The corpus, or none for a site without an error index (the tests' small sites): a page
    with a marker then fails the build, as a marker with no entry."""
    path = pathlib.Path(root) / "code/errors/corpus.yml"
    return yaml.safe_load(path.read_text("utf-8")) if path.is_file() else {}


def check_markers(docs_dir, corpus):
    """Each corpus id has one marker in the pages, and each marker an id in the corpus."""
    found = {}
    for page in sorted(pathlib.Path(docs_dir).rglob("*.md")):
        for match in MARKER.finditer(page.read_text(encoding="utf-8")):
            found.setdefault(match["id"], []).append(page.relative_to(docs_dir).as_posix())
    unknown = sorted(set(found) - set(corpus))
    twice = {error_id: pages for error_id, pages in found.items() if len(pages) > 1}
    missing = sorted(set(corpus) - set(found))
    if unknown or twice or missing:
        raise PluginError(
            "error index: "
            + "; ".join(
                part
                for part in (
                    unknown and f"markers with no entry in code/errors/corpus.yml: {unknown}",
                    twice and f"errors with more than one marker: {twice}",
                    missing and f"corpus errors that no page explains: {missing}",
                )
                if part
            )
        )


def expected(entry, release):
    """The pattern the message must match on `release` (`*` in `expect`: any text)."""
    return matcher((entry.get("releases") or {}).get(release, entry["expect"]))


def lab_line(entry, record):
    """The first line that lab run printed which the entry expects, or None."""
    pattern = expected(entry, record["result"]["env"]["torch"])
    return next((ln.strip() for ln in record["stdout"].splitlines() if pattern.search(ln)), None)


def message(error_id, entry, records):
    printed = entry["printed"]
    if printed == "quoted":
        return entry["quoted"]
    if printed == "lab":
        line = lab_line(entry, records[entry["run"]])
        if line is None:
            raise PluginError(f"error index: lab run {entry['run']!r} printed no {error_id!r}")
        return line
    messages = records[LIVE_RUN]["result"]["messages"]
    if error_id not in messages:
        raise PluginError(f"error index: {REPRODUCE} did not reproduce {error_id!r}")
    return messages[error_id]


def provenance(error_id, entry, records):
    """One sentence: the run that printed the message, or the files that hold it."""
    if entry["printed"] == "quoted":
        files = " and ".join(f"`{path.rsplit('/', 1)[-1]}`" for path in entry["source"])
        return (
            f"Not reproduced here: it needs {entry['needs']}. Quoted from the files of torch "
            f"{entry['release']}: {files}."
        )
    if entry["printed"] == "lab":
        said = f"Printed in this site's build by {entry['shown_in']}."
    else:
        torch = records[LIVE_RUN]["result"]["torch"].split("+")[0]  # 2.15.0, not 2.15.0+cu132
        # the id in a span of its own that does not break at its hyphens (columns.ARG)
        command = f'<code>python {REPRODUCE} <span class="arg">{error_id}</span></code>'
        said = f"Printed by torch {torch} in this site's build: {command}."
    return f"{said} {entry['differs']}" if entry.get("differs") else said


def thread_name(url):
    """`owner/repo#123` for a GitHub thread, the site's name for any other page."""
    github = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)", url)
    return f"{github[1]}#{github[2]}" if github else re.sub(r"^https?://([^/]+).*", r"\1", url)


def render(markdown, corpus, records, page_uri):
    """`markdown` with each error marker replaced by its message, provenance and threads."""

    def replace(marker):
        error_id = marker["id"]
        entry = corpus.get(error_id)
        if entry is None:
            raise PluginError(f"{page_uri}: no error {error_id!r} in code/errors/corpus.yml")
        threads = entry["threads"]
        seen = "\n".join(
            f"    - [{thread_name(thread['url'])}]({thread['url']}): {thread['settled']}"
            for thread in threads
        )
        many = f"{len(threads)} threads" if len(threads) > 1 else "a thread"
        return (
            f"```{{.text .error-message}}\n{message(error_id, entry, records)}\n```\n\n"
            f"{provenance(error_id, entry, records)}\n\n"
            f'??? quote "Seen in {many}, and what {"they" if len(threads) > 1 else "it"}'
            f' settled on"\n\n{seen}\n'
        )

    return MARKER.sub(replace, markdown)
