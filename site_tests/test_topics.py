"""Every topic the one-page module taught is still taught somewhere on the site.

The module was split into chapters and is being rewritten; `module_topics.txt` lists the terms
of the page as it was. A term may move between pages, but it may not disappear.
"""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOPICS = ROOT / "site_tests" / "module_topics.txt"


def topics():
    lines = TOPICS.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def site_sources():
    """The Markdown a reader is shown: every page under docs/, and the sections it includes."""
    pages = [*(ROOT / "docs").rglob("*.md"), *(ROOT / "exercises").rglob("*.md")]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages).lower()


def missing_topics(text):
    return [term for term in topics() if term.lower() not in text]


def test_every_topic_of_the_old_module_page_is_still_taught():
    missing = missing_topics(site_sources())
    assert not missing, f"topics of the old module page no longer on the site: {missing}"


def test_a_dropped_topic_is_reported():
    text = site_sources().replace("powersgd_hook", "a renamed hook")
    assert missing_topics(text) == ["powerSGD_hook"]
