"""MkDocs hook: an abbreviation gets its tooltip where a page first uses it, not every time.

pymdownx.snippets appends docs/includes/abbreviations.md to every page, and the abbr extension
then wraps every DDP, NCCL and busbw in an `<abbr>`: 57 of them in chapter 2, for 8 terms. Each
is underlined, and Material (content.tooltips) mounts a tooltip on each when the page loads:
measured in Lighthouse against plain Material, chapter 2 without its abbreviations cost about
0.2 of the reference's main-thread time less. A reader needs the expansion once, where the term
is new to them, as a printed text spells an abbreviation out at its first use; the glossary
holds every one.

So each term keeps its `<abbr>` at its first use outside a fold (`<details>`: a reader who skips
the folds still meets it), or at its first use in a fold where the page uses it only there;
every other use is left as plain text.
"""

import re

ABBR = re.compile(r'<abbr title="[^"]*">(?P<term>.*?)</abbr>', re.S)
FOLD_EDGE = re.compile(r"<(/?)details\b")


def fold_depths(content):
    """[(offset, depth)]: from each offset on, how many folds (<details>) enclose the text."""
    depths, depth = [(0, 0)], 0
    for edge in FOLD_EDGE.finditer(content):
        depth += -1 if edge[1] else 1
        depths.append((edge.start(), depth))
    return depths


def kept(content):
    """The offsets of the abbreviations that keep their tag: one per term."""
    depths = fold_depths(content)

    def folded(offset):
        return next(depth for start, depth in reversed(depths) if start <= offset) > 0

    first = {}  # term -> the offset of its first use, in the open text if it has one there
    for use in ABBR.finditer(content):
        term, offset = use["term"], use.start()
        if term not in first or (folded(first[term]) and not folded(offset)):
            first[term] = offset
    return set(first.values())


def on_page_content(content, page, config, files):
    keep = kept(content)
    return ABBR.sub(lambda use: use[0] if use.start() in keep else use["term"], content)
