"""MkDocs hook: what the search sees. Its index holds the prose, not the code blocks; a query
is read as plain words.

Every page loads Material's whole search index when it opens, so the index counts against each
page's weight. Code blocks (the fences, their printed output, the lab sources) were 100 KB of
its 265 KB; what they name is also named in the prose around them, which search still finds.
Material's search leaves out any element carrying `data-search-exclude`.

The error indexes are the exception: the failure gallery's (hooks/error_index.py) and the pages
under docs/errors/ (hooks/error_entries.py) show torch's messages in blocks of the class
`error-message`, which this pattern does not match, because a reader pastes exactly those
messages into the search.

A pasted line is not a query. Material hands what is typed to lunr's query language, where
`-9` means "leave out what contains 9", quotation marks make every word inside required, and
`~`, `^`, `*` and `:` are operators. An error line is full of them (`exitcode: -9`, `ulimit -n`,
`AttributeError("Can't get attribute ...")`, `~/.cache`), so pasted whole it found nothing, or
a page that merely lacks the excluded words. Each page's search runs in a worker written here,
PLAIN_WORKER, which turns those characters into spaces and then hands the query to Material's
own worker: the words of the line are what is searched.

The same worker guards a bug of lunr's: for some sets of words in the index, a word ending in a
wildcard (Material adds one to every word of a query) expands to a word the index does not hold,
and the whole query fails. In one CI build, every query holding the word `6` found nothing.
"""

import pathlib
import re

# a block as Python-Markdown writes it, its language named or not (`language-bash highlight`)
CODE_BLOCK = re.compile(r'<div class="((?:language-[\w+#.-]+ )?highlight)"')
# Material's worker, as its theme names it in each page's configuration
WORKER = re.compile(r'"search": "(?P<folder>[^"]*?workers/)(?P<name>search\.\w+\.min\.js)"')
PLAIN_WORKER = "search-plain.js"
PLAIN = """\
// Written by hooks/search_scope.py: Material's search worker, behind one filter. A query is
// read as plain words: lunr takes `-word` for "without word", quotation marks for "every word
// required", and ~ ^ * : for operators, and a pasted error line is full of them.
const QUERY = 2  // Material's SearchMessageType.QUERY
addEventListener("message", (event) => {
  if (event.data.type === QUERY)
    event.data.data = event.data.data.replace(/["~^*:]/g, " ").replace(/(^|\\s)[+-]+/g, "$1")
})
importScripts("MATERIAL")

// lunr's token set may yield, for a wildcard, a term that its inverted index lacks
// (olivernn/lunr.js#314): the query then throws, and Material shows "No matching documents".
// Such a term matches no document, as a term the index never saw.
const NOWHERE = new Proxy({}, { get: (_, key) => (key === "_index" ? -1 : {}) })
const query = lunr.Index.prototype.query
lunr.Index.prototype.query = function (...args) {
  if (!this.guarded) {
    const terms = this.invertedIndex
    const known = (_, term) => (term in terms ? terms[term] : NOWHERE)
    this.invertedIndex = new Proxy(terms, { get: known })
    this.guarded = true
  }
  return query.apply(this, args)
}
"""
MATERIAL_WORKERS = set()


def on_config(config):
    MATERIAL_WORKERS.clear()


def on_page_content(content, page, config, files):
    return CODE_BLOCK.sub(r'<div class="\1" data-search-exclude', content)


def on_post_page(output, page, config):
    def plain(worker):
        MATERIAL_WORKERS.add(worker["name"])
        return f'"search": "{worker["folder"]}{PLAIN_WORKER}"'

    return WORKER.sub(plain, output)


def on_post_build(config):
    if not MATERIAL_WORKERS:  # search is off (`nox -s serve`)
        return
    (material,) = MATERIAL_WORKERS
    folder = pathlib.Path(config.site_dir) / "assets" / "javascripts" / "workers"
    (folder / PLAIN_WORKER).write_text(PLAIN.replace("MATERIAL", material), encoding="utf-8")
