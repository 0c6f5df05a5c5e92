"""Chapter 2's ring figure on the built page: the tour the build's ring run recorded
(labs/test_figures_ddp.py checks the figures drawn from code)."""

import json
import re
from site_tests.labs.test_figures_ddp import alt_of, figures


# ---------------------------------------------------------------------------------------------
# On the built pages: chapter 2's figure is the build's own four-rank tour
# ---------------------------------------------------------------------------------------------
def test_chapter_2_draws_the_tour_the_builds_ring_run_recorded(built_site, figures):
    site, cache = built_site
    (folder,) = cache.glob("ring-*/")
    real = json.loads((folder / "record.json").read_text())["result"]["real"]
    assert real["world_size"] == 4 and list(real["tour"])[0] == "all_reduce"
    markup = (site / "chapters" / "02-collectives" / "index.html").read_text(encoding="utf-8")
    (figure,) = re.findall(
        r'<figure class="fig-figure" id="fig-ring-tour">.*?</figure>', markup, re.S
    )
    assert alt_of(figure) == figures.collectives_alt(real["tour"], 4)
