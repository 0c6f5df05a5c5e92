"""MkDocs hook: blocks whose lines are columns keep them; commands wrap between arguments.

On a phone, commands and printed output wrap (extra.css), so that no line's end hides off the
screen. Where a block's lines are columns (a lab's table of ranks, `squeue`, a job script's
aligned comments), wrapping scrambles them: each wrapped line pushes its neighbours' columns
out of line. Such a block gets the class COLUMNS here, and extra.css keeps its lines whole: it
scrolls inside its own box, and says so under it when it is wider than the screen.

The rule, `is_columns(text)`, is the one home of "columns", and `kept_whole(classes, text)` of
which blocks this hook marks; site_tests/site/test_browser.py asks the latter which blocks of a page
must render one line per line of text. A block is columns when
- it draws with box or table characters (U+2500-U+259F), or
- at least MIN_ALIGNED of its lines have a gap of 2+ spaces between two words that starts or
  ends at the same position (left-aligned columns share where a gap ends, right-aligned ones
  where it starts; a line's indentation is not a gap),
unless a line is longer than PROSE_CHARS: a run that prints a message of several hundred
characters (gloo's errors, in the failure gallery) reads as prose, and wraps.
Only blocks that would wrap are marked (LANGUAGES): Python scrolls anyway, and a diff wraps
under its +/- marker (extra.css), its aligned comments being code, not a table.

Commands (a `bash` or `console` block that is not columns, and diffs) wrap only between
arguments: the
browser may break a line after any hyphen, so `--nproc_per_node=2` came out as `--` over
`nproc_per_node=2`. Each whitespace-separated word with a hyphen in such a block, and in
inline code in a table of prose (hooks/tables.py's cards, whose code may wrap between words),
is put in an ARG span that extra.css keeps on one line.
"""

import html
import re

COLUMNS = "columns"
ARG = "arg"
LANGUAGES = ("language-text", "language-bash", "language-console")  # the ones that wrap
# The blocks whose words with a hyphen are kept whole: commands, and diffs, which wrap too (a
# diff's docstring holds torchrun lines).
COMMANDS = ("language-bash", "language-console", "language-diff")
MIN_ALIGNED = 2
PROSE_CHARS = 160
# A word longer than this may still break: kept whole, it would run past a 360 px phone's
# line (about 37 characters of code beside the copy button) and hide its end.
KEEP_CHARS = 36
BOX = re.compile(r"[\u2500-\u259f]")
GAP = re.compile(r"(?<=\S) {2,}(?=\S)")

# A block as Python-Markdown writes it (`<div class="language-text highlight" ...>`), with the
# class list and the code inside <pre><code>.
BLOCK = re.compile(
    r'<div class="(?P<classes>[^"]*\bhighlight)"(?P<attributes>[^>]*)>'
    r"(?P<before>.*?<code>)(?P<code>.*?)(?P<after></code></pre></div>)",
    re.S,
)
CARDS_TABLE = re.compile(r'(<table class="[^"]*course-table--cards[^"]*">)(.*?)(</table>)', re.S)
INLINE_CODE = re.compile(r"<code>(.*?)</code>", re.S)
TAG_OR_TEXT = re.compile(r"(<[^>]+>)|([^<]+)")
EMPTY_SPAN = re.compile(r'<span class="(?!arg")[^"]*"></span>')  # a highlight closed at once


def is_columns(text):
    """Whether a block's text is laid out in columns (see the module's docstring)."""
    lines = text.split("\n")
    if any(len(line) > PROSE_CHARS for line in lines):
        return False
    if BOX.search(text):
        return True
    lines_at = {}  # ("starts" or "ends", position) -> the lines with a gap there
    for number, line in enumerate(lines):
        for gap in GAP.finditer(line):
            lines_at.setdefault(("starts", gap.start()), set()).add(number)
            lines_at.setdefault(("ends", gap.end()), set()).add(number)
    return any(len(found) >= MIN_ALIGNED for found in lines_at.values())


def longest_line(text):
    return max((len(line) for line in text.split("\n")), default=0)


def text_of(code_html):
    return html.unescape(re.sub(r"<[^>]+>", "", code_html))


def on_page_content(content, page, config, files):
    content = BLOCK.sub(marked, content)
    return CARDS_TABLE.sub(
        lambda table: table[1] + INLINE_CODE.sub(arg_code, table[2]) + table[3], content
    )


def kept_whole(classes, text):
    """Whether a block of these classes and this text is one that this hook marks COLUMNS: a
    block that would wrap (LANGUAGES; the gallery's error index has a layout of its own)."""
    wraps = any(language in classes for language in LANGUAGES) and "error-message" not in classes
    return wraps and is_columns(text)


def marked(block):
    classes = block["classes"].split()
    text = text_of(block["code"])
    if kept_whole(classes, text):
        # The longest line in characters: extra.css shows "scrolls" under the block only
        # when that many characters are wider than the box.
        opening = (
            f'<div class="{block["classes"]} {COLUMNS}"{block["attributes"]}'
            f' style="--columns-chars: {longest_line(text)}">'
        )
        return opening + block["before"] + block["code"] + block["after"]
    if any(language in classes for language in COMMANDS):
        return block[0].replace(block["code"], words_kept_whole(block["code"]), 1)
    return block[0]


def arg_code(code):
    return f"<code>{words_kept_whole(code[1])}</code>"


def words_kept_whole(code_html):
    """`code_html` with each word that holds a hyphen in an ARG span, the markup in it kept.

    A word is what lies between whitespace; one without a hyphen gives the browser no place to
    break it, and is left as it is (a span per word doubled the cheat sheet's elements), and so
    is one longer than KEEP_CHARS.
    Highlighting splits a word into spans (`--nnodes<span class="o">=</span>...`), and a word
    may start inside one span and end outside it: the spans open where a word starts are closed
    before the ARG span opens and opened again inside it, and likewise where it ends.
    """
    parts = TAG_OR_TEXT.findall(code_html)
    text = "".join(piece for _, piece in parts)  # entities hold neither spaces nor hyphens
    edges = {}  # offset in `text` -> True where a kept word starts, False where it ends
    for word in re.finditer(r"\S+", text):
        if "-" in word[0] and 1 < len(html.unescape(word[0])) <= KEEP_CHARS:
            edges[word.start()], edges[word.end()] = True, False
    out, open_tags, at = [], [], 0

    def switch(to_word):
        out.extend("</span>" for _ in open_tags)
        out.append(f'<span class="{ARG}">' if to_word else "</span>")
        out.extend(open_tags)

    for tag, piece in parts:
        if tag:
            if tag.startswith("</"):
                open_tags.pop()
            elif not tag.endswith("/>"):
                open_tags.append(tag)
            out.append(tag)
            continue
        for offset, character in enumerate(piece, start=at):
            if offset in edges:
                switch(edges[offset])
            out.append(character)
        at += len(piece)
    if at in edges:
        switch(edges[at])
    return EMPTY_SPAN.sub("", "".join(out))
