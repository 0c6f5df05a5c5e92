"""MkDocs hook: code blocks without the spans that change nothing a reader sees.

Pygments wraps every name (`n`), every run of whitespace (`w`), every punctuation mark (`p`)
and every operator (`o`) of a code block in a span of its own. Material colours a name exactly as
it colours plain code (`--md-code-hl-name-color` is `--md-code-fg-color`, in both palettes) and
gives whitespace no style at all; extra.css gives punctuation and operators the colour of plain
code too. So those spans only cost: names and spaces were a fifth of a chapter's elements, and
punctuation and operators half of what was left in the failure gallery (2,900 of its elements,
nearly all in the closed folds that hold each case's script, which cost their elements folded
or not). Every one of them is parsed, styled and laid out on a reader's phone, and parsed again
by the search plugin. site_tests/machinery/test_page_hooks.py checks that Material still styles
them that way.

Only the blocks Python-Markdown highlights are touched (`<div class="... highlight">`); a
notebook's cells carry JupyterLab's own classes and styles, and are left as they are.
"""

import re

CODE_BLOCK = re.compile(r'<div class="(?:[\w-]+ )*highlight"[^>]*>.*?</pre></div>', re.S)
PLAIN_SPAN = re.compile(r'<span class="[nwop]">([^<]*)</span>')


def on_page_content(content, page, config, files):
    return CODE_BLOCK.sub(lambda block: PLAIN_SPAN.sub(r"\1", block[0]), content)
