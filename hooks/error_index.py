"""The failure gallery's index of error messages, filled in from what its runs printed.

A reader arrives with an error message and pastes it into the site's search. The search ranks
a section by its heading far above its text, so every message gets a section of its own whose
heading a person wrote in the message's own words:

    ### Timed out waiting for recv operation to complete

    <!-- errors: Timed out waiting * for recv operation to complete -->

The marker's pattern (`*` stands for any text) picks, from the runs whose output is embedded on
the same page, every message it matches. The marker becomes those messages, verbatim, one per
line, in a block the search indexes (hooks/search_scope.py leaves code out, these stay in),
plus links to the sections that printed them.

The index cannot drift from the runs. A message that no marker matches fails the build, so a
new or reworded error gets a section. A marker that matches nothing fails it too, unless it is
written `<!-- errors-sometimes: ... -->`: a message that depends on which rank gives up first.

gloo starts its messages with the place in its sources that raised them, a path on the machine
that built torch (`[/__w/pytorch/.../unbound_buffer.cc:78] Timed out waiting ...`): on a phone
the message itself began off the screen. `lead_with_messages` leaves every such line verbatim
in the page, for search, the page's find and the copy button, and marks its three parts, so
that extra.css shows the message first and the path after it.
"""

import re
import textwrap

from mkdocs.exceptions import PluginError
from views import MARKER as LAB_MARKER

MARKER = re.compile(r"^<!-- errors(?P<sometimes>-sometimes)?: (?P<pattern>.+?) -->$", re.M)
HEADING = re.compile(r"^## (?P<title>.+)$", re.M)
# An error in a run's output: from the exception's name, or what follows the signal that
# killed a rank, to the end of the line (the gallery prints each message on one line).
ERROR = re.compile(
    r"(?:killed by SIG[A-Z]+: |(?<![\w.])(?=[A-Z]\w*(?:Error|Exception): ))(?P<message>.+)$",
    re.M,
)


def errors_in(stdout):
    """Every error message in what a run printed, in order, each once."""
    return list(dict.fromkeys(match["message"].strip() for match in ERROR.finditer(stdout)))


def matcher(pattern):
    """`pattern` as a regex: `*` stands for any text, across lines too (a message may have
    several; the gallery's have one each)."""
    return re.compile(".*".join(map(re.escape, pattern.split("*"))), re.S)


def printing_sections(markdown, slugify):
    """{run name: (section title, anchor)} for each run whose output the page embeds."""
    sections = {}
    for match in LAB_MARKER.finditer(markdown):
        if match["view"] != "stdout":
            continue
        headings = list(HEADING.finditer(markdown, 0, match.start()))
        if not headings:
            raise PluginError(f"the output of {match['run']} sits under no `## ` heading")
        title = headings[-1]["title"].strip()
        sections[match["run"]] = (title, slugify(title.replace("`", ""), "-"))
    return sections


def render(markdown, records, slugify, page_uri):
    """`markdown` with each errors marker replaced by the messages it matches."""
    if not MARKER.search(markdown):
        return markdown
    sections = printing_sections(markdown, slugify)
    printed = {run: errors_in(records[run]["stdout"]) for run in sections}
    indexed = set()

    def replace(marker):
        found = matcher(marker["pattern"])
        matched = {run: [m for m in printed[run] if found.search(m)] for run in sections}
        runs = [run for run, messages in matched.items() if messages]
        messages = [m for run in runs for m in matched[run]]
        indexed.update(messages)
        if not runs:
            if marker["sometimes"]:
                return "None of the runs behind this page printed it this time.\n"
            raise PluginError(
                f"{page_uri}: no run on this page printed an error matching "
                f"{marker['pattern']!r}; reword the marker, or drop its section"
            )
        links = [f"[{sections[run][0]}](#{sections[run][1]})" for run in runs]
        block = "\n".join(dict.fromkeys(messages))
        return f"Printed in {' and '.join(links)}.\n\n```{{.text .error-message}}\n{block}\n```\n"

    markdown = MARKER.sub(replace, markdown)
    missing = [(run, m) for run in sections for m in printed[run] if m not in indexed]
    if missing:
        listed = "\n".join(f"  {run}: {textwrap.shorten(m, 160)}" for run, m in missing)
        raise PluginError(
            f"{page_uri}: errors its runs printed that no `<!-- errors: ... -->` marker "
            f"matches; give each a section:\n{listed}"
        )
    return markdown


# A line of a code block that carries a gloo message: what comes before it (a rank, the
# exception's name), the build path in brackets, then the message.
PATH_FIRST = re.compile(
    r"^(?P<open>(?:<[^>]*>)*)(?P<lead>[^<\n]*?(?<![\w.])[A-Z]\w*(?:Error|Exception): )"
    r"(?P<path>\[/[^\]\s<]+:\d+\] ?)(?P<message>[^<\s][^<\n]*)",
    re.M,
)
PRE = re.compile(r"(<pre\b[^>]*>)(.*?)(</pre>)", re.S)


def lead_with_messages(content):
    """Each code line `LEAD [PATH:LINE] MESSAGE` wrapped in spans that CSS puts in the order
    LEAD, MESSAGE, PATH; the text and its order in the page stay as the run printed them."""

    def mark(line):
        spans = "".join(
            f'<span class="error-line__{name}">{line[name]}</span>'
            for name in ("lead", "path", "message")
        )
        return f'{line["open"]}<span class="error-line">{spans}</span>'

    return PRE.sub(lambda pre: pre[1] + PATH_FIRST.sub(mark, pre[2]) + pre[3], content)
