"""Every topic the one-page module taught is still taught somewhere on the site, in chapters
short enough to read in one sitting.

The module was split into chapters and is being rewritten; `module_topics.txt` lists the terms
of the page as it was. A term may move between pages, but it may not disappear.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOPICS = ROOT / "site_tests" / "tools" / "module_topics.txt"
CHAPTERS = ROOT / "docs" / "chapters"
# A chapter's ceiling, in words of its prose (prose_words). Its code, its "How we know" and
# "Changed in" blocks, and the exercises it includes at its end are not read in one sitting
# with the prose, and are not counted.
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


# A fence opens with three or more backticks or tildes, at any indent (inside an admonition
# too), and closes with a line of at least as many of the same character and nothing else.
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
# A block left out of the count, folded (`???`, `???+`) or not (`!!!`), with or without a
# type: "How we know" (and "How we know: ...") and "Changed in ..." blocks.
LEFT_OUT_BLOCK = re.compile(
    r'^(?P<indent> *)(\?\?\?\+?|!!!)( +[\w-]+)? +"(How we know|Changed in)[^"]*" *$'
)
SNIPPET = "--8<--"  # an include line, or a line that opens or closes a block of includes
WORD = re.compile(r"\w")  # a word has a letter, a digit or "_": "-", "|", "##" are markup


def prose_words(markdown):
    """Words of a page's prose: its text, headings, lists, tables and admonitions, less code
    fences, "How we know" and "Changed in" blocks (the header line and every following line
    that is blank or indented 4 spaces past it), HTML comments (the lab markers) and
    snippet includes."""
    count, fence, block, in_snippets, in_comment = 0, None, None, False, False
    for line in markdown.splitlines():
        stripped = line.strip()
        if fence:
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fence = None
            continue
        if block is not None:
            if not stripped or len(line) - len(line.lstrip(" ")) >= block + 4:
                continue
            block = None
        if in_snippets:
            in_snippets = stripped != SNIPPET
            continue
        if not in_comment:
            if match := LEFT_OUT_BLOCK.match(line):
                block = len(match["indent"])
                continue
            if match := FENCE.match(line):
                fence = match[1]
                continue
            if stripped.startswith(SNIPPET):
                in_snippets = stripped == SNIPPET
                continue
        text, kept = line, []
        while text:  # what lies outside <!-- ... -->, which may span lines
            if in_comment:
                _, found, text = text.partition("-->")
                in_comment = not found
            else:
                before, found, text = text.partition("<!--")
                kept.append(before)
                in_comment = bool(found)
        count += sum(1 for token in " ".join(kept).split() if WORD.search(token))
    return count


def chapter_words():
    return {
        page.name: prose_words(page.read_text(encoding="utf-8")) for page in CHAPTERS.glob("*.md")
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


# Every exclusion of prose_words, each with words it must not count; PROSE lists the words it
# must count, so a counter that forgets any exclusion gets a larger number.
SAMPLE = """# A sample page

The first paragraph has eight words in it.

```python title="a fence"
print("code is not prose")
```

- a list item counts
- | a | table | row | counts |

??? note "How we know"
    A fold holds checks a reader would not write:

    ```python
    assert "the fence inside the fold" != "prose"
    ```

!!! note "Changed in 2.14"

    | Behaviour | 2.13 | 2.14 |
    |---|---|---|
    | a table row in the note | absent | added |

<!-- lab:sample:marker -->

!!! warning "A note that counts"
    Its body counts as prose:

    ~~~text
    but not the fence inside it
    ~~~

Last <!-- an inline comment --> words here.
--8<-- "exercises/pages/an_exercise.md"
"""
PROSE = """
A sample page The first paragraph has eight words in it.
a list item counts a table row counts
warning A note that counts Its body counts as prose:
Last words here.
"""


def test_the_prose_count_leaves_out_code_folds_comments_and_includes():
    assert prose_words(SAMPLE) == len(PROSE.split()) == 32
