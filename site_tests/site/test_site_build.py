"""The built site: lab outputs embedded from this build's runs, links that resolve, no traceback.

One real `mkdocs build --strict` with an empty lab cache is shared by the tests that read the
built HTML (it runs every lab, so it is the slowest fixture of the suite). The hook's behaviour
on failure, on timeout and on a cache hit is tested on a tiny throw-away site whose lab needs no
torch, so those builds take about a second each. MkDocs itself fails the build on a broken
Markdown link (mkdocs.yml's `validation`); the built HTML is checked for the links it cannot see.
"""

import dataclasses
import html
import importlib.util
import json
import pathlib
import re
import sys
import textwrap
from html.parser import HTMLParser
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml
from markdown.extensions.toc import slugify

from hooks import fence_parser
from site_tests.conftest import ROOT, declared, mkdocs_build, pace
from site_tests.labs.test_where_stuck import SCRIPT as STUCK_SCRIPT
from site_tests.labs.test_where_stuck import call_lines


def record(cache, name):
    (folder,) = cache.glob(f"{name}-*/")
    return json.loads((folder / "record.json").read_text())


def page_text(site, page):
    return (site / page / "index.html").read_text(encoding="utf-8")


def visible_text(markup):
    """The page's text as a reader sees it, whitespace collapsed."""
    without_tags = re.sub(r"<[^>]+>", "", markup)
    return re.sub(r"\s+", " ", html.unescape(without_tags))


def test_lab_page_shows_this_builds_run(built_site):
    site, cache = built_site
    gloo = record(cache, "gloo")
    text = visible_text(page_text(site, "labs/ddp-gloo"))
    env = gloo["result"]["env"]
    for fact in (
        gloo["started_utc"],
        f"{gloo['wall_s']:.2f} s",
        gloo["git_commit"],
        env["torch"],
        env["python"],
        env["cpu_model"],
        " ".join(gloo["command"]),
    ):
        assert fact in text, f"provenance {fact!r} missing from the lab page"
    for line in gloo["stdout"].strip().splitlines():
        assert re.sub(r"\s+", " ", line).strip() in text, f"printed line {line!r} not embedded"


def result_rows(markup):
    """{label: value} of every two-column table row whose first cell is a label."""
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*</tr>", markup, re.DOTALL)
    return {visible_text(label).strip(): visible_text(value).strip() for label, value in rows}


def numbers_in(cell):
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", cell)]


# How the results table rounds each kind of number, as pytest.approx tolerances: half a unit
# of the last digit shown (a hair more, for the binary float under a decimal half). `abs=0`
# matters for the 1e-16 differences: pytest.approx's default abs of 1e-12 would let any
# value that small pass.
SLACK = 1 + 1e-9


def significant(figures):
    return {"rel": 0.5 * 10 ** (1 - figures) * SLACK, "abs": 0}


def decimals(places):
    return {"rel": 0, "abs": 0.5 * 10**-places * SLACK}


EXACT = {"rel": 0, "abs": 0}
TABLE_ROWS = (
    "Naive DDP",
    "DistributedDataParallel:",
    "DistributedDataParallel with",
    "Negative control",
    "DDP gradient buckets",
    "4 MiB all_reduce: median time",
    "4 MiB all_reduce: algbw",
    "4 MiB memory copy",
    "reduce_scatter with",
    "busbw as a fraction",
)


def expected_table(result):
    """{row label prefix: ([values], tolerance)}: what the results view must show, how close."""
    variants, allreduce = result["variants"], result["allreduce_4mib"]
    rows = [
        ([variants["naive"]["max_abs_diff"]], significant(3)),
        ([variants["ddp"]["max_abs_diff"]], significant(3)),
        ([variants["ddp_no_sync"]["max_abs_diff"]], significant(3)),
        ([result["control_max_abs_diff"]], significant(3)),
        ([result["ddp_buckets"]], EXACT),
        ([allreduce["seconds"] * 1e3], decimals(2)),
        ([allreduce["algbw_GBps"], allreduce["busbw_GBps"]], decimals(2)),
        ([result["memcpy_4mib"]["GBps"]], decimals(2)),
        # "averages (rank 0 got 1.5 from inputs 1 … 2)", the value printed with :g
        ([0, result["reduce_scatter_avg_value"], 1, result["world_size"]], significant(6)),
        ([result["busbw_over_memcpy"]], decimals(3)),
    ]
    return dict(zip(TABLE_ROWS, rows, strict=True))


def table_mismatches(rows, result):
    """Every row of `rows` (label -> shown text) that does not show what `result` holds."""
    problems = []
    for prefix, (values, tolerance) in expected_table(result).items():
        shown = [value for label, value in rows.items() if label.startswith(prefix)]
        if len(shown) != 1:
            problems.append(f"{prefix}: {len(shown)} rows")
            continue
        numbers = numbers_in(shown[0])
        if len(numbers) != len(values) or any(
            got != pytest.approx(want, **tolerance)
            for got, want in zip(numbers, values, strict=True)
        ):
            problems.append(f"{prefix}: shows {shown[0]!r}, the run has {values}")
    return problems


def pages_with_marker(marker):
    """Site paths of the pages whose Markdown carries `marker` (its view is embedded there)."""
    return sorted(
        path.relative_to(ROOT / "docs").with_suffix("").as_posix()
        for path in (ROOT / "docs").rglob("*.md")
        if marker in path.read_text(encoding="utf-8")
    )


@pytest.mark.parametrize("page", pages_with_marker("<!-- lab:gloo:results -->"))
def test_results_table_equals_the_runs_json(built_site, page):
    site, cache = built_site
    result = record(cache, "gloo")["result"]
    rows = result_rows(page_text(site, page))
    assert table_mismatches(rows, result) == []
    replicas = [v for label, v in rows.items() if label.startswith("Replicas bit-identical")]
    assert replicas == ["yes" if result["replicas_identical"] else "no"]
    averaging = [v for label, v in rows.items() if label.startswith("reduce_scatter with")]
    assert averaging[0].startswith(result["reduce_scatter_avg_behaviour"])


def times_ten(text):
    """`text` with its first number shown ten times larger, in the same notation."""
    match = re.search(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)
    number = match[0]
    if "e" in number:
        mantissa, exponent = number.split("e")
        bigger = f"{mantissa}e{int(exponent) + 1:+03d}"
    elif float(number) == 0:
        bigger = "10"
    else:
        bigger = f"{float(number) * 10:.{len(number.partition('.')[2])}f}"
    return text[: match.start()] + bigger + text[match.end() :]


@pytest.mark.parametrize("prefix", TABLE_ROWS)
def test_a_table_edited_to_ten_times_a_value_fails(built_site, prefix):
    site, cache = built_site
    result = record(cache, "gloo")["result"]
    rows = result_rows(page_text(site, "labs/ddp-gloo"))
    ((label, value),) = [(k, v) for k, v in rows.items() if k.startswith(prefix)]
    edited = dict(rows, **{label: times_ten(value)})
    assert table_mismatches(edited, result) != [], (label, value, edited[label])


def test_sweep_figure_is_built_and_described(built_site):
    site, cache = built_site
    result = record(cache, "gloo")["result"]
    markup = page_text(site, "labs/ddp-gloo")
    # One rendering per palette; Material shows the one whose suffix matches the palette.
    tags = [dict(re.findall(r'(\w+)="([^"]*)"', tag)) for tag in re.findall(r"<img [^>]+>", markup)]
    images = {
        tag["src"].rsplit("#only-", 1)[1]: (tag["alt"], tag["src"].split("#")[0])
        for tag in tags
        if re.search(r"allreduce-sweep(-dark)?\.svg#only-(light|dark)$", tag.get("src", ""))
    }
    assert sorted(images) == ["dark", "light"], images
    for alt, src in images.values():
        assert len(alt) > 40, "the figure needs alt text that describes it"
        figure = (site / "labs/ddp-gloo" / src).resolve()
        assert figure.is_file() and b"<svg" in figure.read_bytes()[:1000]
    assert images["light"][1] != images["dark"][1]
    table = markup[markup.index("The measured points") :]
    assert table.count("<tr>") - 1 >= len(result["sweep"])  # a header row, then one per size


class Links(HTMLParser):
    """A page's ids, and its link targets, each marked True when it sits in the page's article."""

    def __init__(self):
        super().__init__()
        self.ids, self.targets, self.in_article = set(), [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.in_article |= tag == "article"
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for name in ("href", "src"):
            if attrs.get(name):
                self.targets.append((attrs[name], self.in_article))

    def handle_endtag(self, tag):
        self.in_article &= tag != "article"


def parse(path, cache={}):  # noqa: B006  (a per-process memo of parsed pages)
    if path not in cache:
        parser = Links()
        parser.feed(path.read_text(encoding="utf-8"))
        cache[path] = parser
    return cache[path]


def from_markdown(site, page):
    """Whether MkDocs rendered `page` from a Markdown file (not a notebook, not the 404 page)."""
    folder = page.parent.relative_to(site)
    if page.name != "index.html":
        return False
    if folder == pathlib.Path("."):
        return (ROOT / "docs" / "index.md").is_file()
    return (ROOT / "docs" / folder.with_suffix(".md")).is_file()


def validated_by_mkdocs(site, page, in_article, path):
    """A link MkDocs checked while building (mkdocs.yml's `validation`): one written in the
    Markdown of a page, to a page. Links in the theme, in pages it does not render, and to files
    the hooks write (downloads, figures), it cannot see: those are checked here."""
    return from_markdown(site, page) and in_article and path.suffix in ("", ".html")


def test_links_mkdocs_does_not_validate_resolve(built_site):
    site, _ = built_site
    broken = []
    for page in sorted(site.rglob("*.html")):
        for target, in_article in parse(page).targets:
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or target.startswith(("mailto:", "data:")):
                continue
            if not parts.path:
                path = page
            elif parts.path.startswith("/"):  # 404.html links from the site root
                path = site / unquote(parts.path).lstrip("/")
            else:
                path = (page.parent / unquote(parts.path)).resolve()
            if path.is_dir():
                path = path / "index.html"
            if validated_by_mkdocs(site, page, in_article, path):
                continue
            if not path.is_file():
                broken.append(f"{page.relative_to(site)}: {target} (no such file)")
            elif path.suffix != ".html":
                continue  # an image's #only-light / #only-dark picks a palette, not an anchor
            elif parts.fragment and unquote(parts.fragment) not in parse(path).ids:
                broken.append(f"{page.relative_to(site)}: {target} (no such anchor)")
    assert not broken, "\n".join(broken)


RAW_LINK = re.compile(r"<(?:a|img|link|script|iframe)\b[^>]*\b(?:href|src)\s*=", re.I)


def raw_html_links(markdown):
    """The HTML in `markdown` (not in its code) that links somewhere: MkDocs leaves it as is."""
    tokens = fence_parser.parser().parse(markdown)
    inline = [child for token in tokens for child in token.children or []]
    return [
        token.content.strip()
        for token in tokens + inline
        if token.type in ("html_block", "html_inline") and RAW_LINK.search(token.content)
    ]


def test_no_page_writes_a_link_in_raw_html():
    """MkDocs validates the links written in Markdown only; a raw HTML link to a page would go
    unchecked (test_links_mkdocs_does_not_validate_resolve leaves the pages' links to MkDocs)."""
    raw = {
        str(path.relative_to(ROOT)): links
        for path in sorted((ROOT / "docs").rglob("*.md"))
        if (links := raw_html_links(path.read_text(encoding="utf-8")))
    }
    assert not raw, f"write these links in Markdown, so that MkDocs checks them: {raw}"


def test_a_raw_html_link_is_found_and_code_is_not():
    found = raw_html_links('Text <a href="../gone/">x</a>\n\n<img src="x.png">\n\n`<a href="y">`\n')
    assert sorted(found) == ['<a href="../gone/">', '<img src="x.png">']


def site_validation():
    """mkdocs.yml's `validation` block, as MkDocs reads it."""
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)["validation"]


LINKS = {
    "a good link": ("[there](other.md#here)", None),
    "an anchor missing on another page": ("[x](other.md#gone)", "does not contain an anchor"),
    "an anchor missing on this page": ("[x](#gone)", "no such anchor on this page"),
    "a page that does not exist": ("[x](gone.md)", "not found among documentation files"),
    "a link MkDocs cannot resolve": ("[x](other/)", "unrecognized relative link"),
}


@pytest.mark.parametrize("link, complaint", LINKS.values(), ids=list(LINKS))
def test_a_broken_markdown_link_fails_the_strict_build_at_its_source(tmp_path, link, complaint):
    """With the site's `validation` block, `mkdocs build --strict` (and serve) names the page
    and the link; the built-HTML check above is left the links MkDocs cannot see."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(f"# Home\n\n{link}\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Here\n")
    config = {"site_name": "Links", "nav": ["index.md", "other.md"]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config | {"validation": site_validation()}))
    proc = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site", tmp_path / "cache", 60)
    if complaint is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0, proc.stderr
        assert complaint in proc.stderr and "Doc file 'index.md'" in proc.stderr, proc.stderr


def test_no_traceback_anywhere_in_the_site(built_site):
    site, _ = built_site
    offenders = [
        path.relative_to(site)
        for path in site.rglob("*")
        if path.is_file() and b"Traceback (most recent call last)" in path.read_bytes()
    ]
    assert not offenders


def test_nccl_views_render_a_gpu_record(built_site):
    """No GPU record is committed yet; render the NCCL page's views from one shaped like it.

    The shape is the gloo run's record plus the GPU-only keys that code/ddp/nccl.py writes
    (site_tests/labs/schemas/nccl_lab.json lists them); the numbers are made up and only their
    placement is checked.
    """
    sys.path.insert(0, str(ROOT / "hooks"))
    import labrunner
    import views
    from views.common import Context

    _, cache = built_site
    gloo = record(cache, "gloo")
    point = {"bytes": 4096, "seconds": 1.25e-5, "algbw_GBps": 0.33, "busbw_GBps": 0.5}
    result = dict(
        gloo["result"],
        lab="ddp_nccl",
        collectives=dict(gloo["result"]["collectives"], send_recv_ring=None),
        sweep=[point],
        sweep_bf16=[dict(point, seconds=1.5e-5, busbw_GBps=0.25)],
        ddp_step={
            "model": "2 x (Linear(8, 8) + GELU), bfloat16",
            "parameters": 144,
            "gradient_bytes": 288,
            "batch": 4,
            "buckets": 1,
            "compute_only_s": 0.002,
            "with_comm_s": 0.003,
            "exposed_comm_s": 0.001,
            "allreduce_gradients_s": 0.004,
        },
        gpu={
            "model": "Test GPU",
            "count": 1,
            "capability": "9.0",
            "memory_GiB": 1.0,
            "driver": "1.0",
            "cuda": "12.8",
            "nccl": "2.27.3",
        },
        note="NCCL will not run two ranks on one GPU.",
    )
    run = labrunner.LabRun(
        "nccl",
        {"script": "code/ddp/nccl.py", "recorded": "docs/labs/recorded/x.json"},
        ROOT,
    )
    context = Context(run=run, record=dict(gloo, result=result), page_uri="labs/ddp-nccl.md")
    results = views.render("nccl-results", context)
    assert "0.013 ms, 0.5 GB/s | 0.015 ms, 0.2 GB/s" in results
    assert "| Share of that all_reduce hidden under backward | 75% |" in results
    assert "not run at this world size: send_recv_ring" in results
    assert "NCCL will not run two ranks on one GPU." in results
    provenance = views.render("provenance", context)
    assert "1× Test GPU" in provenance and "1.0, 12.8, 2.27.3" in provenance
    unrecorded = dataclasses.replace(context, record=None)
    assert "No run recorded yet" in views.render("provenance", unrecorded)
    assert views.render("nccl-results", unrecorded) == ""


# ---------------------------------------------------------------------------------------------
# Every error the gallery printed is in the search index, under a section of its own
# ---------------------------------------------------------------------------------------------
def gallery_errors(cache):
    """{run name: its error messages} for this build's failure-gallery runs."""
    sys.path.insert(0, str(ROOT / "hooks"))
    import error_index
    import views

    markers = views.MARKER.finditer(page_source("failures.md"))
    names = [m["run"] for m in markers if m["view"] == "stdout"]
    return {name: error_index.errors_in(record(cache, name)["stdout"]) for name in names}


def page_source(uri):
    return (ROOT / "docs" / uri).read_text(encoding="utf-8")


def test_every_error_the_gallery_printed_is_indexed_for_search(built_site):
    """The ranking itself is checked in a browser (test_browser.py pastes them in)."""
    site, cache = built_site
    index = json.loads((site / "search" / "search_index.json").read_text())
    sections = {
        d["location"]: html.unescape(d["text"])
        for d in index["docs"]
        if d["location"].startswith("failures/#")
    }
    index_part = page_source("failures.md").split("\n## Find your error message\n")[1]
    entries = {
        f"failures/#{slugify(title, '-')}"
        for title in re.findall(r"^### (.+)$", index_part.split("\n## ")[0], re.M)
    }
    errors = gallery_errors(cache)
    assert sum(map(len, errors.values())) >= 8, errors  # the cases that show real errors
    for name, messages in errors.items():
        for message in messages:
            homes = {where for where, text in sections.items() if message in text}
            assert homes & entries, f"{name}: {message!r} is in no error-index section"


# The site was split from one long page, "the module", which also named its sibling modules by
# number ("FSDP (module 27)"). None of them is published: a reader who follows such a pointer
# finds nothing. Code is left out (a DDP wrapper's `.module` is another matter).
MODULE_LEFTOVER = re.compile(r"\b(?:modules? \d+|the module's|(?:in|from|read) the module)\b", re.I)


def module_leftovers(markup):
    article = markup.split("<article", 1)[-1].split("</article>", 1)[0]
    prose = re.sub(r"<(pre|code)\b.*?</\1>", " ", article, flags=re.S)
    text = visible_text(prose)
    return [text[max(0, m.start() - 40) : m.end() + 20] for m in MODULE_LEFTOVER.finditer(text)]


def test_a_pointer_to_the_old_module_is_caught():
    old = "<article><p>FSDP (module 27) shards it. Read <a>the module</a> first.</p></article>"
    assert len(module_leftovers(old)) == 2
    ours = "<article><p>Save <code>ddp.module</code>, the module inside the wrapper.</p></article>"
    assert module_leftovers(ours) == []


def test_no_page_points_at_the_one_page_module_it_was_split_from(built_site):
    site, _ = built_site
    found = {}
    for index in sorted(site.rglob("index.html")):
        if hits := module_leftovers(index.read_text(encoding="utf-8")):
            found[index.parent.relative_to(site).as_posix()] = hits[:3]
    assert not found, found


def test_chapter_shows_the_dump(built_site):
    site, _ = built_site
    page = (site / "chapters" / "06-debugging" / "index.html").read_text(encoding="utf-8")
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    body = call_lines(STUCK_SCRIPT, "log_on_rank0_then_barrier")
    for call in ("dist.all_reduce(", "dist.barrier("):
        (line,) = [n for n, code in body.items() if code.startswith(call)]
        assert f"log_on_rank0_then_barrier ({STUCK_SCRIPT.name}:{line})" in text, call
    assert "py-spy dump --pid" in text
    assert 'href="../../failures/#1-a-collective-inside-if-rank-0"' in page
    # the file those line numbers are in is the one the page offers for download
    assert 'href="../../code/debugging/where_stuck.py"' in page
    for name in (f"debugging/{STUCK_SCRIPT.name}", "pace.py", "provenance.py"):
        assert (site / "code" / name).read_bytes() == (ROOT / "code" / name).read_bytes()


# A picture per mechanism: every chapter draws at least one, the course at least MIN_FIGURES.
MIN_FIGURES = 10
FIGURE = re.compile(r"<figure\b.*?</figure>", re.DOTALL)


def figures_of(markup):
    """The page's figures that draw something (inline SVG or an SVG image). A stepper's panels
    are one figure, shown a step at a time: its first panel stands for it."""
    drawn = [f for f in FIGURE.findall(markup) if re.search(r"<svg\b|<img [^>]*\.svg", f)]
    panels = [f for f in drawn if "fig-stepper__panel" in f]
    return [f for f in drawn if f not in panels[1:]]


def test_every_chapter_has_a_figure_and_each_figure_says_what_it_shows(built_site):
    site, _ = built_site
    counts, undescribed = {}, []
    for chapter in sorted((ROOT / "docs" / "chapters").glob("*.md")):
        markup = page_text(site, f"chapters/{chapter.stem}")
        figures = figures_of(markup)
        counts[chapter.stem] = len(figures)
        for figure in figures:
            caption = re.search(r"<figcaption([^>]*)>(.*?)</figcaption>", figure, re.DOTALL)
            # A text alternative: the SVG's <title>, an image's alt, or the caption itself when
            # the SVG names it (aria-labelledby), as the ring stepper's panels do.
            caption_id = re.search(r'id="([^"]+)"', caption.group(1)) if caption else None
            alt = re.search(r"<title[^>]*>(.+?)</title>|<img [^>]*alt=\"([^\"]{20,})", figure) or (
                caption_id and f'aria-labelledby="{caption_id.group(1)}"' in figure
            )
            if not (caption and visible_text(caption.group(2)).strip() and alt):
                undescribed.append(f"{chapter.stem}: {visible_text(figure)[:60]!r}")
    assert all(counts.values()), f"chapters without a figure: {counts}"
    assert sum(counts.values()) >= MIN_FIGURES, f"{sum(counts.values())} figures: {counts}"
    assert not undescribed, f"figures without a caption or a text alternative: {undescribed}"


# ---------------------------------------------------------------------------------------------
# Addresses published before code/ was grouped by family still work
# ---------------------------------------------------------------------------------------------
def test_every_old_address_still_serves_what_moved(built_site):
    """A saved link to a raw script gets the file as it is now; an old lab page redirects."""
    site, _ = built_site
    for old, new in declared()["moved_code"].items():
        assert (site / old).is_file(), f"{old} (now {new}) is gone from the site"
        assert (site / old).read_bytes() == (ROOT / new).read_bytes(), f"{old} is not {new}"
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    (redirects,) = [p["redirects"] for p in config["plugins"] if "redirects" in p]
    for old, new in redirects["redirect_maps"].items():
        page = (site / old.removesuffix(".md") / "index.html").read_text()
        (url,) = re.findall(r'http-equiv="refresh" content="0; url=([^"]+)"', page)
        lands = urljoin(f"https://site/{old.removesuffix('.md')}/", url)
        assert lands == f"https://site/{new.removesuffix('.md')}/", f"{old} sends to {url}"
