"""Chapter 8's compile lab as the build ran it: its record, and what the chapter shows of it.

The lab's own tests (labs/test_compile_ddp.py) run it on every release; these read the run the
site build recorded (the built_site fixture), on the pinned torch.
"""

import copy
import pytest
import re
from site_tests.labs.test_compile_ddp import compile_ddp, compiled


def test_a_warm_cache_skips_the_compile_and_inductor_rounds_like_float32(compiled):
    result, _ = compiled
    inductor = result["inductor"]
    assert inductor["warm_s"] * 3 < inductor["cold_s"]
    assert inductor["grad_vs_eager"] <= 1e-5


def test_the_chapter_shows_the_run(compiled):
    result, text = compiled
    rows = {row["order"]: row for row in result["orders"]}
    for row in rows.values():
        assert row["first_key"] in text
    cold = result["inductor"]["cold_s"]
    line = f"empty cache {cold:8.2f} s {cold / result['import_torch_s']:6.2f}x import torch"
    assert re.sub(r"\s+", " ", line) in text  # as the page's text reads, spaces collapsed
    assert "printed when this site was built" in text


@pytest.mark.teeth
def test_check_refuses_each_broken_claim(compiled):
    result, _ = compiled
    assert compile_ddp.check(result) is None

    def broken(edit):
        bad = copy.deepcopy(result)
        edit(bad)
        return compile_ddp.check(bad)

    assert "graphs for" in broken(lambda r: r["graphs"][0].update(graphs=1))
    assert "fewer graphs" in broken(lambda r: r["graphs"][1].update(graphs=99))
    assert "default cap" in broken(lambda r: r["graphs"][2].update(buckets=1))
    assert "explicit" in broken(lambda r: r["graphs"][1].update(buckets=2))
    assert "differ" in broken(lambda r: r["orders"][1].update(grad_vs_eager=1e-3))
    assert "differ" in broken(lambda r: r["orders"][0].update(rank_diff=1e-3))
    assert "agree" in broken(lambda r: r["orders"][2].update(rank_diff=0.0))
    assert "rounding" in broken(lambda r: r["inductor"].update(grad_vs_eager=1e-3))
