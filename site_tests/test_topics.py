"""Every topic the one-page module taught is still taught somewhere on the site, in chapters
short enough to read in one sitting.

The module was split into chapters and is being rewritten; `module_topics.txt` lists the terms
of the page as it was. A term may move between pages, but it may not disappear.
"""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOPICS = ROOT / "site_tests" / "module_topics.txt"
CHAPTERS = ROOT / "docs" / "chapters"
# A chapter's ceiling, in words of its Markdown source with its code. The exercises a chapter
# includes at its end are practice, not reading, and are not counted.
CHAPTER_WORDS = 3000


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


def chapter_words():
    return {
        page.name: len(page.read_text(encoding="utf-8").split()) for page in CHAPTERS.glob("*.md")
    }


def too_long(words):
    return {name: count for name, count in words.items() if count > CHAPTER_WORDS}


def test_no_chapter_runs_past_its_word_ceiling():
    words = chapter_words()
    assert len(words) >= 5, f"the chapters are missing: {sorted(words)}"
    assert not too_long(words), f"over {CHAPTER_WORDS} words: {too_long(words)}"


def test_a_chapter_past_the_ceiling_is_reported():
    words = {"at-the-ceiling.md": CHAPTER_WORDS, "one-past.md": CHAPTER_WORDS + 1}
    assert too_long(words) == {"one-past.md": CHAPTER_WORDS + 1}
