"""MkDocs hook: show how one script becomes another, as a unified diff of the real files.

A page asks for it with a marker on a line of its own:

    <!-- diff:code/first_job/train_single.py code/first_job/train_ddp.py -->

and gets a `diff` block of the whole second file, each line it adds marked `+` and each line
it drops marked `-`, made from the files as they are at build time, so the page cannot drift
from the code. A missing file fails the build.
"""

import difflib
import pathlib
import re

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!-- diff:(?P<old>\S+) (?P<new>\S+) -->$", re.MULTILINE)
WHOLE_FILE = 10_000  # lines of context: the reader follows the whole script, not hunks


def unified(root, old, new):
    texts = []
    for name in (old, new):
        path = root / name
        if not path.is_file():
            raise PluginError(f"diff marker names {name}, which does not exist")
        texts.append(path.read_text(encoding="utf-8").splitlines())
    lines = difflib.unified_diff(*texts, old, new, n=WHOLE_FILE, lineterm="")
    body = [line for line in lines if not line.startswith("@@")]
    return "\n".join(body)


def on_page_markdown(markdown, page, config, files):
    root = pathlib.Path(config.config_file_path).resolve().parent

    def replace(match):
        title = f"{match['old']} → {match['new']}"
        return f'``` {{ .diff title="{title}" }}\n{unified(root, match["old"], match["new"])}\n```'

    return MARKER.sub(replace, markdown)
