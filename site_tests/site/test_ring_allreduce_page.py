"""Chapter 2's ring stepper on the built page, frame by frame against the build's ring run
(labs/test_ring_allreduce.py runs the ring itself)."""

import re
from site_tests.labs.test_ring_allreduce import build_record


def test_the_module_page_steps_through_every_frame(built_site):
    site, cache = built_site
    result = build_record(cache, "ring")
    markup = (site / "chapters" / "02-collectives" / "index.html").read_text(encoding="utf-8")
    (stepper,) = re.findall(r"<div class=\"fig-stepper\" data-stepper.*?\n</div>", markup, re.S)
    panels = re.findall(r'<figure class="fig-stepper__panel" id="([^"]+)">(.*?)</figure>', stepper)
    assert len(panels) == len(result["frames"]) == 2 * (result["ranks"] - 1) + 1
    for (panel_id, body), frame in zip(panels, result["frames"], strict=True):
        assert f'aria-labelledby="{panel_id}-caption"' in body
        (caption,) = re.findall(rf'<figcaption id="{panel_id}-caption">(.*?)</figcaption>', body)
        for send in frame["sends"]:
            assert f"rank {send['src']} sends c{send['chunk']}" in caption
        assert f"Each rank has sent {frame['bytes_sent'][0]} B" in caption or not frame["sends"]
        assert body.count("<rect") == result["ranks"] ** 2  # one cell per rank and chunk
    assert result["real"]["all_reduce"] == result["simulated"]
