"""The notebook page as built: the executed outputs and the download
(labs/test_notebook.py runs the notebook itself)."""

import html as htmllib
import re
from site_tests.labs.test_notebook import NOTEBOOK, SPAWN_ERROR


def test_built_page_shows_outputs_and_download(built_site):
    site, _ = built_site
    html = (site / "notebooks" / "ddp-from-a-notebook" / "index.html").read_text()
    text = htmllib.unescape(re.sub(r"<[^>]+>", "", html))  # what a reader sees
    assert SPAWN_ERROR in text and "ProcessExitedException" in text
    assert "all_reduce gives 3" in text and "forked rank 1" in text
    assert (site / "notebooks" / "ddp-from-a-notebook" / NOTEBOOK.name).is_file()
    links = re.findall(rf'<a [^>]*href="{re.escape(NOTEBOOK.name)}"[^>]*>', html)
    assert links and all("download" in link for link in links), links
    assert "Traceback (most recent call last)" not in html
    assert '"cell_type"' not in html  # rendered by mkdocs-jupyter, not shown as JSON
