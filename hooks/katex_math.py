"""MkDocs hook: typeset every formula when the site is built, so that no page runs KaTeX.

pymdownx.arithmatex (generic mode) leaves each formula in the page as
`<span class="arithmatex">\\(...\\)</span>` or `<div class="arithmatex">\\[...\\]</div>`. This
hook replaces what is inside with KaTeX's output, HTML for the eye and MathML for screen
readers, rendered by pykatex: KaTeX 0.16.22 (the release of the stylesheet and fonts in
docs/assets/katex) running in QuickJS, so the build needs no Node.js. Typesetting a chapter's
formulas in the browser had kept a phone's main thread busy for seconds.

A formula KaTeX cannot parse fails the build with the page and the formula. Rendered math is
kept out of the search index (its text would be the formula twice over, as HTML and MathML).
"""

import functools
import html
import re

import pykatex
from mkdocs.exceptions import PluginError

FORMULA = re.compile(r'<(?P<tag>span|div) class="arithmatex">(?P<body>.*?)</(?P=tag)>', re.S)
DELIMITERS = {"span": ("\\(", "\\)"), "div": ("\\[", "\\]")}


@functools.cache  # mkdocs serve rebuilds in the same process: an unchanged formula is free
def typeset(tex, display):
    return pykatex.renderToString(tex, displayMode=display, throwOnError=True)


def on_page_content(content, page, config, files):
    def replace(match):
        tag, source = match["tag"], html.unescape(match["body"]).strip()
        opening, closing = DELIMITERS[tag]
        if not (source.startswith(opening) and source.endswith(closing)):
            raise PluginError(f"{page.file.src_uri}: a formula without its delimiters: {source}")
        try:
            rendered = typeset(source[len(opening) : -len(closing)], display=tag == "div")
        except pykatex.ParseError as error:
            message = f"{page.file.src_uri}: KaTeX cannot typeset {source}: {error}"
            raise PluginError(message) from None
        return f'<{tag} class="arithmatex" data-search-exclude>{rendered}</{tag}>'

    return FORMULA.sub(replace, content)
