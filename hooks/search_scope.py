"""MkDocs hook: the search index holds the prose, not the code blocks.

Every page loads Material's whole search index when it opens, so the index counts against each
page's weight. Code blocks (the fences, their printed output, the lab sources) were 100 KB of
its 265 KB; what they name is also named in the prose around them, which search still finds.
Material's search leaves out any element carrying `data-search-exclude`.

The failure gallery's error index (hooks/error_index.py) is the exception: its blocks carry the
class `error-message`, which this pattern does not match, because a reader pastes exactly those
messages into the search.
"""

import re

# a block as Python-Markdown writes it, its language named or not (`language-bash highlight`)
CODE_BLOCK = re.compile(r'<div class="((?:language-[\w+#.-]+ )?highlight)"')


def on_page_content(content, page, config, files):
    return CODE_BLOCK.sub(r'<div class="\1" data-search-exclude', content)
