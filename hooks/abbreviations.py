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
# A fold's edge or an abbreviation, read in one pass in the page's order.
FOLD_EDGE_OR_ABBR = re.compile(rf"<(?P<closes>/?)details\b|{ABBR.pattern}", re.S)


def kept(content):
    """The offsets of the abbreviations that keep their tag: one per term."""
    depth, first_open, first_folded = 0, {}, {}  # term -> the offset of its first use
    for token in FOLD_EDGE_OR_ABBR.finditer(content):
        if token["term"] is None:
            depth += -1 if token["closes"] else 1
        else:
            (first_folded if depth else first_open).setdefault(token["term"], token.start())
    return set((first_folded | first_open).values())  # the open text's first use wins


def on_page_content(content, page, config, files):
    keep = kept(content)
    return ABBR.sub(lambda use: use[0] if use.start() in keep else use["term"], content)
