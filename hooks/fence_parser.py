"""Where a page's python fences are: the one parser the build and the fence tests share.

The build runs every python fence and shows its output (hooks/fences.py); pytest-markdown-docs
collects every python fence as a test, through the parser site_tests/tools/fence_plugin.py hands it,
which is `parser()` below. One parser means the fences a reader sees run are the fences the
tests run, and no others (site_tests/machinery/test_fence_plugin.py checks it on every page of
docs/).

markdown-it reads the page as CommonMark with Material's admonitions (mdit-py-plugins' admon
plugin), so a fence in a `!!!` or `???` fold counts. A fence in a content tab (`===`) does not:
CommonMark reads the tab's indented body as a code block, and the fence plugin refuses such a
page. It needs markdown-it-py and mdit-py-plugins only (pinned in requirements.txt).
"""

from markdown_it import MarkdownIt
from mdit_py_plugins.admon import admon_plugin

# The languages pytest-markdown-docs runs as tests, and the option that opts a fence out
PYTHON = {"python", "py", "python3"}
NOT_A_TEST = "notest"


class AdmonitionMarkdownIt(MarkdownIt):
    """CommonMark with Material's admonitions, where blank lines never end a fold early.

    markdown-it's admonition plugin closes a block at two consecutive empty lines, and with it
    any fence inside, so the rest of a fence that ruff formats with two blank lines between
    functions would never run. MkDocs keeps such a fence whole. Giving each empty line between
    two indented lines their common indentation (line numbers unchanged) makes both agree; each
    fence's code is then read from the page as written, so those blank lines stay empty.
    """

    def parse(self, src, env=None):
        tokens = super().parse(indent_blank_lines(src), env)
        lines = src.split("\n")
        for token in tokens:
            if token.type == "fence" and token.map:
                token.meta["span"] = span(lines, token)
                line, end, indent = token.meta["span"]
                token.content = "\n".join(text[len(indent) :] for text in lines[line:end]) + "\n"
        return tokens


def span(lines, fence):
    """(first line of the body, closing line, indentation) of a fence token, counted from 0.

    A fence left open ends where its container does; its "closing line" is the one after.
    """
    opening, after = fence.map
    closing = lines[after - 1].strip() if after - 1 > opening else ""
    closed = closing.startswith(fence.markup) and not closing.strip(fence.markup[0])
    indent = lines[opening][: len(lines[opening]) - len(lines[opening].lstrip())]
    return opening + 1, after - 1 if closed else after, indent


def indent_blank_lines(text):
    lines = text.split("\n")
    indents = [len(line) - len(line.lstrip(" ")) if line.strip() else None for line in lines]
    for i, indent in enumerate(indents):
        if indent is not None:
            continue
        before = next((n for n in reversed(indents[:i]) if n is not None), 0)
        after = next((n for n in indents[i + 1 :] if n is not None), 0)
        lines[i] = " " * min(before, after)
    return "\n".join(lines)


def parser():
    return AdmonitionMarkdownIt("commonmark").use(admon_plugin)


def info_words(info):
    """The words of a fence's info string, language first, as pymdownx.superfences reads it.

    `{ .python title="x" }` names its language as a class; pytest-markdown-docs (run with
    `--markdown-docs-syntax=superfences`) reads it the same way.
    """
    info = info.strip()
    if not info.startswith("{"):
        return info.split()
    words = info.strip("{}").split()
    language = next((word for word in words if word.startswith(".")), None)
    if language:
        words.remove(language)
        words.insert(0, language[1:])
    return words


class Fence:
    """A python fence: where its body starts and ends, its indentation, info string and code,
    and whether it is nested in a block (a fold, a list item) rather than at the top level.

    Line numbers count from 0. `line` is the first line of the body and `end` the closing line
    (or the line after the last, for a fence left open); output goes after `end`.
    """

    def __init__(self, line, end, indent, info, code, nested):
        self.line, self.end, self.indent = line, end, indent
        self.info, self.code, self.nested = info, code, nested


def python_fences(markdown, markdown_it=None):
    """Every python fence of `markdown` that pytest-markdown-docs would collect, in order."""
    fences = []
    for token in (markdown_it or parser()).parse(markdown):
        if token.type != "fence" or not token.map:
            continue
        words = info_words(token.info)
        if not words or words[0] not in PYTHON or NOT_A_TEST in words:
            continue
        line, end, indent = token.meta["span"]
        fences.append(Fence(line, end, indent, token.info, token.content, token.level > 0))
    return fences


def hidden_fences(markdown, markdown_it=None):
    """The lines (from 1) of the python fences CommonMark reads as part of an indented code
    block, as in a content tab (`===`): MkDocs shows them, but nothing collects or runs them."""
    markdown_it = markdown_it or parser()
    return [
        token.map[0] + fence.line
        for token in markdown_it.parse(markdown)
        if token.type == "code_block" and token.map
        for fence in python_fences(token.content, markdown_it)
    ]
