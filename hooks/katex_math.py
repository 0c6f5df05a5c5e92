"""MkDocs hook: typeset every formula when the site is built, so that no page runs KaTeX.

pymdownx.arithmatex (generic mode) leaves each formula in the page as
`<span class="arithmatex">\\(...\\)</span>` or `<div class="arithmatex">\\[...\\]</div>`. This
hook replaces what is inside with KaTeX's output, rendered by pykatex: KaTeX 0.16.22 (the
release of the stylesheet and fonts in docs/assets/katex) running in QuickJS, so the build needs
no Node.js. Typesetting a chapter's formulas in the browser had kept a phone's main thread busy
for seconds.

The output is MathML alone, which Chrome (109 on), Firefox and Safari lay out themselves, in the
system's math font. KaTeX's HTML draws each symbol as a positioned span and keeps a MathML copy
for screen readers besides: about 2,200 of chapter 2's 5,100 elements, which made the chapters
with math the heaviest pages to lay out on a phone. A display formula keeps KaTeX's
`katex-display` wrapper, for its spacing and centring.

Every formula of chapters 2, 3 and 7 was compared in both renderings, in screenshots at 1400 and
390 px. MathML set them all as well, its spacing in sub- and superscripts a little looser, but
one: chapter 3's display of the gradient as a mean of means, where Chromium drew the sums at
text size, with their limits crowding the terms, and the underbrace as a dot. MATHML_FALLS_SHORT
names what that formula had: a brace over or under terms anywhere, a big operator with limits in
a display. A formula that has one keeps KaTeX's HTML (and its MathML copy for screen readers).

A formula KaTeX cannot parse fails the build with the page and the formula. Rendered math is
kept out of the search index (its text would be the formula's symbols run together).

The browser may break a line between an inline formula and the punctuation after it (a formula
is one box to it, and a line may start after any box): a line of chapter 3 started with the
full stop after a formula. An inline formula and the punctuation right after it go in a TAIL
span, which extra.css keeps on one line.
"""

import functools
import html
import re

import pykatex
from mkdocs.exceptions import PluginError

# A formula and any punctuation written right after it (what a line must not start with).
FORMULA = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">(?P<body>.*?)</(?P=tag)>(?P<after>[.,;:!?)\]\'’-]*)',
    re.S,
)
TAIL = "math-tail"
DELIMITERS = {"span": ("\\(", "\\)"), "div": ("\\[", "\\]")}
# What MathML renders worse than KaTeX's HTML (see above): anywhere, and in a display formula.
MATHML_FALLS_SHORT = re.compile(r"\\(underbrace|overbrace)(?![a-zA-Z])")
IN_DISPLAY_TOO = re.compile(r"\\(sum|prod|int|oint|bigcup|bigcap|coprod)(?![a-zA-Z])")


def keeps_html(tex, display):
    """Whether a formula is typeset as KaTeX's HTML (with MathML beside it) rather than MathML."""
    return bool(MATHML_FALLS_SHORT.search(tex) or (display and IN_DISPLAY_TOO.search(tex)))


@functools.cache  # mkdocs serve rebuilds in the same process: an unchanged formula is free
def typeset(tex, display):
    if keeps_html(tex, display):
        return pykatex.renderToString(tex, displayMode=display, throwOnError=True)
    mathml = pykatex.renderToString(tex, displayMode=display, throwOnError=True, output="mathml")
    # KaTeX's HTML wraps a display formula so; its stylesheet spaces and centres the wrapper
    return f'<span class="katex-display">{mathml}</span>' if display else mathml


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
        formula = f'<{tag} class="arithmatex" data-search-exclude>{rendered}</{tag}>'
        if tag == "span" and match["after"]:
            return f'<span class="{TAIL}">{formula}{match["after"]}</span>'
        return formula + match["after"]  # a display formula is a block: nothing follows it

    return FORMULA.sub(replace, content)
