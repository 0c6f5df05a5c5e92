"""MkDocs hook: a page loads a script of extra_javascript only where it has what the script
works on.

mkdocs.yml lists its scripts once, for every page. Two of them work on one kind of element
each: chapter 2's ring stepper (a `data-stepper` figure) and chapter 7's scaling calculator (a
`data-scaling-calculator` form). On every other page they cost a phone a request,
a parse and a compile, to find nothing.
"""

import re

from mkdocs.exceptions import PluginError

# A script's path under the site, and the attribute that marks what it works on.
NEEDS = {
    "assets/javascripts/stepper.js": "data-stepper",
    "assets/javascripts/scaling-calculator.js": "data-scaling-calculator",
}


def on_post_page(output, page, config):
    for script, marker in NEEDS.items():
        if re.search(rf"\s{marker}[\s>=]", output):
            continue
        tag = re.compile(rf'<script [^>]*src="[^"]*{re.escape(script)}"[^>]*></script>\n?')
        output, found = tag.subn("", output)
        if found != 1:
            raise PluginError(f"{page.file.src_uri}: expected one <script> for {script}")
    return output
