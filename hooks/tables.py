"""MkDocs hook: tables come out of the build the way Material would have mounted them.

Once a page has loaded, Material takes each plain table (`table:not([class])`) out of the page
and puts it back inside its scroll wrapper. Re-inserting a table re-creates everything in it,
and chapter 2's table of collectives holds some 1,250 elements of typeset math: on a phone,
that one swap was most of the chapter's blocking time, and kept it under Lighthouse's bar.

So the build writes each table inside Material's wrapper already, with a class that tells
Material's mount to leave it be. Material's stylesheet only styles a plain table, so the
build also writes `assets/stylesheets/tables.css`: every rule Material has for a plain table,
aimed at this class instead. Material stays the one home of how a table looks.
site_tests/machinery/test_page_hooks.py checks both halves, and test_browser.py that a built table
looks exactly as a table Material mounted.

A table of prose (three columns or more, and a cell of more than CARD_CHARS characters) cannot
be read on a phone in columns: the cheat sheet's "What it does" came out a letter or two wide,
and chapter 6's failure table ran 1,045 px wide with its last columns out of sight. Such a
table also gets the class CARDS, and each of its cells the heading of its column as
`data-label`; on a narrow screen extra.css shows each row as a card, every cell under its
column's name.
"""

import html
import html.parser
import pathlib
import re

import tinycss2
from mkdocs.exceptions import PluginError

TABLE_CLASS = "course-table"
PLAIN_TABLE = "table:not([class])"  # Material's selector, for its mount and for its styles
TABLE = re.compile(r"<table>(.*?)</table>", re.S)
WRAPPED = (
    '<div class="md-typeset__scrollwrap"><div class="md-typeset__table">'
    f'<table class="{TABLE_CLASS}">{{}}</table></div></div>'
)
STYLESHEET = "assets/stylesheets/tables.css"  # listed under extra_css in mkdocs.yml


CARDS = "course-table--cards"
CARD_CHARS = 50  # a cell longer than this is prose, not a value
ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
CELL_OPENING = re.compile(r"<(?P<tag>td|th)(?P<attributes>[^>]*)>")


def on_page_content(content, page, config, files):
    return TABLE.sub(lambda table: built(table[1]), content)


def built(inner):
    """A table's inner HTML, wrapped as Material mounts it; a table of prose gets cards."""
    rows = [cells_text(row) for row in ROW.findall(inner)]
    longest = max((len(cell) for row in rows[1:] for cell in row), default=0)
    if not rows or len(rows[0]) < 3 or longest <= CARD_CHARS:
        return WRAPPED.format(inner)
    headings = rows[0]

    def labelled(row):
        cells = iter(headings)

        def label(opening):
            if opening["tag"] == "th":
                return opening[0]
            name = html.escape(next(cells, ""), quote=True)
            return f'<td{opening["attributes"]} data-label="{name}">'

        return f"<tr>{CELL_OPENING.sub(label, row[1])}</tr>"

    cards = ROW.sub(labelled, inner)
    return WRAPPED.replace(f'class="{TABLE_CLASS}"', f'class="{TABLE_CLASS} {CARDS}"').format(cards)


class _CellText(html.parser.HTMLParser):
    """The text of each cell of one row, formulas left out (KaTeX writes each one twice)."""

    def __init__(self):
        super().__init__()
        self.cells, self.math_depth, self.depth = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in ("td", "th"):
            self.cells.append("")
            return
        self.depth += 1
        if self.math_depth or "arithmatex" in (dict(attrs).get("class") or "").split():
            self.math_depth += 1

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            return
        self.depth -= 1
        if self.math_depth:
            self.math_depth -= 1

    def handle_data(self, data):
        if self.cells and not self.math_depth:
            self.cells[-1] += data


def cells_text(row):
    parser = _CellText()
    parser.feed(row)
    return [" ".join(text.split()) for text in parser.cells]


def on_post_build(config):
    sheets = pathlib.Path(config["site_dir"]) / "assets" / "stylesheets"
    (material,) = sheets.glob("main.*.min.css")
    css = table_rules(material.read_text(encoding="utf-8"))
    if not css:
        raise PluginError(f"{material.name} has no rule for {PLAIN_TABLE}: see hooks/tables.py")
    (sheets.parent.parent / STYLESHEET).write_text(css, encoding="utf-8")


def table_rules(css):
    """Every rule of `css` that styles a plain table, aimed at TABLE_CLASS instead."""

    def aimed(rule):
        if rule.type == "qualified-rule":
            selector = tinycss2.serialize(rule.prelude)
            if PLAIN_TABLE not in selector:
                return ""
            ours = selector.replace(PLAIN_TABLE, f"table.{TABLE_CLASS}")
            return f"{ours}{{{tinycss2.serialize(rule.content)}}}"
        if rule.type == "at-rule" and rule.lower_at_keyword in ("media", "supports"):
            inner = "".join(map(aimed, parse(rule.content or [])))
            prelude = tinycss2.serialize(rule.prelude)
            return f"@{rule.at_keyword}{prelude}{{{inner}}}" if inner else ""
        return ""  # fonts, keyframes, ...: not the table's

    def parse(tokens):
        return tinycss2.parse_blocks_contents(tokens, skip_comments=True, skip_whitespace=True)

    rules = tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True)
    return "".join(map(aimed, rules))
