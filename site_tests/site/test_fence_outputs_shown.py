"""Every chapter fence's output under it on the built page (machinery/test_fence_outputs.py
tests the hook that runs them on small sites of its own)."""

from site_tests.conftest import ROOT, mkdocs_build
import pytest
from site_tests.machinery.test_fence_outputs import outputs, outside_folds, teaching_fence_count


@pytest.mark.parametrize(
    "chapter", sorted(p.stem for p in (ROOT / "docs" / "chapters").glob("*.md"))
)
def test_every_chapter_fence_shows_its_output(built_site, chapter):
    site, _ = built_site
    source = (ROOT / "docs" / "chapters" / f"{chapter}.md").read_text(encoding="utf-8")
    markup = (site / "chapters" / chapter / "index.html").read_text(encoding="utf-8")
    shown = [block for block in outputs(outside_folds(markup)) if block.strip()]
    assert len(shown) == teaching_fence_count(source), (
        f"{chapter}: {teaching_fence_count(source)} fences teach, {len(shown)} show output; "
        "a fence that teaches prints what it shows"
    )
