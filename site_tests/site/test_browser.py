"""The built site in a real browser, at 1400 px on a desktop and 390 px on a phone.

The built site (this session's, or $SITE_DIR's) is served gzip-compressed, the way a publishing host
serves it, by Debian's nginx on 127.0.0.1 (a free port). Chromium (Debian's), driven by
Playwright, opens every page the build wrote: every `index.html` but the redirect stubs, so a
page added to the site is tested without being named here. A request for any other host fails
a test (the site must work offline), and so do console errors and uncaught exceptions.

Then, on every page: no code block of a chapter scrolls sideways at 1400 px, no figure text is
drawn under 10 px at 390 px, no table cell breaks a word, the page weighs at most 1 MB
uncompressed, axe-core finds no serious or critical violation, and Lighthouse 12.2.3 (mobile),
calibrated to this machine, finds the page no heavier than plain Material beside it, within its
budgets, and scores at least 95 for accessibility and best practices (lighthouse_gate.py).

Every server and browser the module starts names the session's guarded folder in its command
line (conftest.py): when the session ends, however it ends, a guardian kills them all.

What needs a tool that is missing skips with the reason: Chromium, nginx, or the npm tools
(`.ci/run` installs all of them; site_tests/tools/package.json and its lock pin the npm ones).
Screenshots of every page at both widths go to site_tests/artifacts/ (ignored by git) for a
person to look at.
"""

import ast
import contextlib
import html
import http.client
import io
import json
import math
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlsplit

import columns  # hooks/columns.py: which code blocks are columns (conftest: hooks/ on the path)
import error_entries as error_entries_hook  # hooks/error_entries.py: the error index's markers
import psutil
import pytest
import yaml
from markdown.extensions.toc import slugify

from site_tests.tools import lighthouse_gate as gate
from site_tests.conftest import (
    NPM_DIR,
    ROOT,
    START_TMP,
    declared,
    labrunner,
    mkdocs_build,
    npm_tool,
    pace,
    processes_naming,
)

CHROMIUM = pathlib.Path("/usr/bin/chromium")
if shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        f"no Chromium at {CHROMIUM} (on Debian/Ubuntu: apt-get install chromium)",
        allow_module_level=True,
    )
NGINX = shutil.which("nginx") or shutil.which("/usr/sbin/nginx")
if NGINX is None:
    pytest.skip("no nginx to serve the site (on Debian: apt-get install nginx)", True)
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

ARTIFACTS = pathlib.Path(__file__).parents[1] / "artifacts"
# The flags the issue names for Lighthouse's Chromium, and the same for Playwright's.
HEADLESS_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
CHROMIUM_ARGS = [*HEADLESS_FLAGS[1:], "--disable-component-update", "--disable-sync"]
DESKTOP = {"viewport": {"width": 1400, "height": 900}}
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
NEXT_FRAME = "() => new Promise((done) => requestAnimationFrame(() => done()))"
# Between the two: a laptop's screen, where code of 88 columns no longer fits its box (it does
# down to about 1250 px) but the phone's layout has not begun (below 720 px).
LAPTOP = {"viewport": {"width": 1024, "height": 768}}
PAGE_BUDGET_BYTES = 1_000_000
LEGIBLE_PX = 11
REDIRECT_STUB = '<meta http-equiv="refresh"'


# ---------------------------------------------------------------------------------------------
# The pages, a kept server, one browser for the module
# ---------------------------------------------------------------------------------------------
def site_pages(site):
    """Every page of the built site as its path from the root ("" is home), redirects left out."""
    pages = []
    for index in sorted(site.rglob("index.html")):
        if REDIRECT_STUB in index.read_text(encoding="utf-8"):
            continue
        folder = index.parent.relative_to(site).as_posix()
        pages.append("" if folder == "." else f"{folder}/")
    return pages


@pytest.fixture(scope="module")
def site_build(request):
    """(site, lab cache): this session's build, or the site already built in $SITE_DIR.

    SITE_DIR lets a person check a site they just built (`nox -s build` writes site/, with the
    labs cached in .cache/labs) without the suite's own cold build, which reruns every lab.
    """
    if folder := os.environ.get("SITE_DIR"):
        cache = os.environ.get("LAB_CACHE_DIR", ROOT / ".cache" / "labs")
        return pathlib.Path(folder).resolve(), pathlib.Path(cache)
    return request.getfixturevalue("built_site")


@pytest.fixture(scope="module")
def pages(site_build):
    found = site_pages(site_build[0])
    assert len(found) >= 5 and "" in found, found
    return found


def pages_with(site_build, needle):
    """The pages whose built HTML contains `needle` (a figure, a widget, some math)."""
    site = site_build[0]
    return [
        path
        for path in site_pages(site)
        if needle in (site / path / "index.html").read_text(encoding="utf-8")
    ]


def one_page_with(site_build, needle):
    found = pages_with(site_build, needle)
    assert found, f"no page of the site contains {needle!r}"
    return found[0]


NGINX_CONF = """
daemon off;
worker_processes 1;
{user}
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    access_log off;
    client_body_temp_path {work}/tmp;
    proxy_temp_path {work}/tmp;
    fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp;
    scgi_temp_path {work}/tmp;
    # As a publishing host serves a static site (GitHub Pages compresses these types).
    gzip on;
    gzip_vary on;
    gzip_min_length 256;
    gzip_types text/css application/javascript application/json image/svg+xml text/plain;
    server {{
        listen 127.0.0.1:{port};
        root {site};
        error_page 404 /404.html;
        # Answered by this server alone: what answers a connection to the port may be another
        # process that took the port first (start_nginx).
        location = /{ready} {{ default_type text/plain; return 200 "{token}"; }}
        {extras}
    }}
}}
"""


READY_PATH = "ready-for-the-tests"
PORT_TRIES = 5  # free_port's port taken by another process before nginx binds it: rare


@pytest.fixture(scope="module")
def served(site_build, guarded_folder, lighthouse_extras):
    """The built site behind nginx with gzip on; its base URL. Stopped after the module.

    nginx's prefix lies in the guarded folder: a killed test session takes nginx with it.
    `lighthouse_extras` ({URL path: folder}) are served beside the site, for the Lighthouse gate.
    """
    site, _ = site_build
    with tempfile.TemporaryDirectory(prefix="nginx-", dir=guarded_folder) as temporary:
        work = pathlib.Path(temporary)
        (work / "tmp").mkdir()
        # nginx run by root hands its worker to another user, who could not read pytest's
        # private temporary folders: keep the worker as the user running the tests.
        user = f"user {pathlib.Path.home().name};" if os.geteuid() == 0 else ""
        extras = "".join(
            f"location /{path} {{ alias {folder}/; }}\n"
            for path, folder in lighthouse_extras.items()
        )
        settings = {"user": user, "work": work, "site": site, "extras": extras}
        server, port = start_nginx(work, settings)
        try:
            yield f"http://127.0.0.1:{port}/"
        finally:
            stop_nginx(server)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_nginx(work, settings):
    """nginx on a free port, answering: (its process, the port).

    Nothing reserves the port free_port found: another process (a rank's store, beside us) may
    bind it first. nginx then retries its bind for a while and exits, and until it does, a
    connection to the port reaches the other process. So nginx is ready when it answers
    READY_PATH with this start's token, and a port taken is given up for another.
    """
    conf, log = work / "nginx.conf", work / "error.log"
    for _ in range(PORT_TRIES):
        port, token = free_port(), secrets.token_hex(8)
        conf.write_text(NGINX_CONF.format(port=port, ready=READY_PATH, token=token, **settings))
        log.unlink(missing_ok=True)  # this start's errors only
        server = subprocess.Popen(
            [NGINX, "-p", str(work), "-c", str(conf)],
            start_new_session=True,
            stderr=subprocess.PIPE,
        )
        if answers_as_nginx(server, port, token):
            return server, port
        errors = stop_nginx(server) + (log.read_text() if log.exists() else "")
        if "Address already in use" not in errors:
            break
    pytest.fail(f"nginx did not start on port {port}: {errors}")


def answers_as_nginx(server, port, token, timeout_s=15):
    """Whether `server` answers READY_PATH on `port` with `token` within its time limit; False
    as soon as it has exited."""
    deadline = time.monotonic() + pace.limit(timeout_s)
    while time.monotonic() < deadline and server.poll() is None:
        if http_get(port, f"/{READY_PATH}") == token:
            return True
        time.sleep(0.1)
    return False


def http_get(port, path):
    """The body of a 200 reply to GET `path` on 127.0.0.1:`port`; None for any other outcome
    (nothing listening yet, another status, a listener that does not speak HTTP)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=pace.limit(1))
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.read().decode(errors="replace") if reply.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def stop_nginx(server):
    """Stop nginx gracefully (its worker exits with it), or kill its group; what it wrote to
    stderr."""
    if server.poll() is None:
        server.send_signal(signal.SIGQUIT)
    try:
        server.wait(timeout=pace.limit(10))
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=pace.limit(10))
    errors = server.stderr.read().decode(errors="replace")
    server.stderr.close()
    return errors


@pytest.fixture(scope="module")
def browser(guarded_folder):
    """One Chromium for the module, driven by Playwright.

    Playwright's driver makes Chromium's profile in its TMPDIR, read when the driver starts:
    a folder in the guarded folder, so that a Chromium left by a killed session dies with it.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", tempfile.mkdtemp(prefix="pw-", dir=guarded_folder))
        playwright = playwright_api.sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()


def settle_fonts(page):
    """Lay the page out, then wait until every web font that layout asked for has loaded.

    A web font (KaTeX's) loads only once a layout needs it, and until it has, text is laid out
    in a fallback font's widths: a formula measured then is not the formula a reader sees.
    """
    page.evaluate("() => { document.body.getBoundingClientRect(); }")
    page.wait_for_function("() => document.fonts.status === 'loaded'")


class Visit:
    """One page in a fresh browser context, with everything it asked for and complained of."""

    def __init__(self, browser, base, path, **context_options):
        self.path = path
        self.requests, self.errors, self.responses = [], [], []
        self.context = browser.new_context(service_workers="block", **context_options)
        # Recorded, not intercepted: routing would also catch the search worker's requests,
        # and Material's search stops working under it. The machine has no network anyway.
        self.context.on("request", lambda request: self.requests.append(request.url))
        self.context.on("response", lambda response: self.responses.append(response))
        self.page = self.context.new_page()
        # fail in seconds, not half a minute, per step (at pace's reference machine)
        self.page.set_default_timeout(pace.limit(15) * 1000)
        self.page.on("console", self.console)
        self.page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        self.page.goto(base + path, wait_until="load")
        # the search index and its worker's script: Material asks for them, load waits for neither
        self.page.wait_for_load_state("networkidle")
        if context_options.get("java_script_enabled", True):
            settle_fonts(self.page)

    def console(self, message):
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser, served):
    """Open a page in a context of its own, for a test that clicks, types or resizes."""
    opened = []

    def open_page(path, **context_options):
        opened.append(Visit(browser, served, path, **{**DESKTOP, **context_options}))
        return opened[-1]

    yield open_page
    for page in opened:
        page.close()


@pytest.fixture(scope="module")
def seen(browser, served):
    """Each page opened once per screen for the whole module, for tests that only look."""
    opened = {}

    def open_once(path, screen="desktop"):
        if (path, screen) not in opened:
            options = DESKTOP if screen == "desktop" else PHONE
            opened[path, screen] = Visit(browser, served, path, **options)
        return opened[path, screen]

    yield open_once
    for page in opened.values():
        page.close()


def each_page(pages, check):
    """Run `check(path)` on every page; one failure message per page that fails it."""
    failures = {}
    for path in pages:
        if found := check(path):
            failures[path or "home"] = found
    return "\n".join(f"{page}: {found}" for page, found in failures.items())


# Every fold opened and every tab shown. A fold's "toggle" event comes in a later task, and
# a11y.js measures the fold's code then: each opened fold is marked until its event has come.
REVEAL = """() => {
  const style = document.createElement("style");
  style.textContent = ".tabbed-block { display: block !important; }";
  document.head.append(style);
  for (const fold of document.querySelectorAll("article details:not([open])")) {
    fold.dataset.revealed = "opening";
    fold.addEventListener("toggle", () => { fold.dataset.revealed = "open"; }, { once: true });
    fold.open = true;
  }
}"""
# a11y.js listens on the document, in the capture phase: before the fold's own listener
TOGGLED = "() => !document.querySelector('details[data-revealed=opening]')"


def reveal_everything(page):
    """Open every fold and every tab, so that the checks see what a reader can open, once the
    page has done what opening them makes it do (a11y.js, the fonts of the text revealed)."""
    page.evaluate(REVEAL)
    page.wait_for_function(TOGGLED)
    settle_fonts(page)


# Material mounts a code block (its copy button, an id for its <pre>) once it comes into view
# (content.lazy in mkdocs.yml), in a later frame.
MOUNTED = "(code) => code.closest('pre').id.startsWith('__code_')"


def mount_code_blocks(page):
    """Bring each code block of the article that a reader can see into view, and wait until
    Material has mounted it: which ones are mounted otherwise depends on where earlier tests
    (a full-page screenshot) left the page."""
    for code in page.locator("article .highlight pre > code").element_handles():
        if code.evaluate("(code) => code.getClientRects().length > 0"):
            code.evaluate("(code) => code.scrollIntoView({ block: 'center' })")
            page.wait_for_function(MOUNTED, arg=code)


def open_search(page):
    """Material shows the search box in the header on wide screens, behind a button on narrow."""
    button = page.locator("label.md-header__button[for=__search]")
    if button.is_visible():
        button.click()
    page.locator("input.md-search__input").click()


# ---------------------------------------------------------------------------------------------
# Every page
# ---------------------------------------------------------------------------------------------
def test_every_page_loads_offline_without_errors(seen, pages):
    def check(path):
        visited = seen(path)
        foreign = [
            url
            for url in visited.requests
            if not url.startswith(("data:", "blob:")) and urlsplit(url).hostname != "127.0.0.1"
        ]
        problems = visited.errors + [f"request that left 127.0.0.1: {url}" for url in foreign]
        if len(visited.requests) <= 3:
            problems.append("the page's CSS and scripts were not fetched")
        return problems

    assert not (failed := each_page(pages, check)), failed


def test_every_page_is_served_compressed(seen, pages):
    """The server the scores are measured against compresses, as a publishing host does."""
    visited = seen(pages[0])
    (document,) = [
        r for r in visited.responses if r.url.rstrip("/") == visited.page.url.rstrip("/")
    ]
    assert document.all_headers().get("content-encoding") == "gzip"


def test_every_image_has_a_text_alternative(seen, pages):
    def check(path):
        return seen(path).page.evaluate(
            """() => {
            const name = (el) => {
              if (el.tagName.toLowerCase() === "img") return el.getAttribute("alt") || "";
              const ids = (el.getAttribute("aria-labelledby") || "").split(/\\s+/);
              const labelled = ids.map((id) => document.getElementById(id)?.textContent || "");
              return (el.getAttribute("aria-label") || "") + labelled.join(" ");
            };
            return [...document.querySelectorAll("article img, article [role=img]")]
              .filter((el) => name(el).trim().length < 10)
              .map((el) => el.outerHTML.slice(0, 120));
          }"""
        )

    assert not (failed := each_page(pages, check)), failed


def test_headings_start_at_h1_and_skip_no_level(seen, pages):
    def check(path):
        levels = seen(path).page.evaluate(
            """() => [...document.querySelectorAll("article :is(h1, h2, h3, h4, h5, h6)")]
                       .map((h) => [Number(h.tagName[1]), h.textContent])"""
        )
        if not levels or levels[0][0] != 1:
            return f"the first heading is not an h1: {levels[:1]}"
        return [
            f"h{a} {ta!r} -> h{b} {tb!r}"
            for (a, ta), (b, tb) in zip(levels, levels[1:], strict=False)
            if b > a + 1
        ]

    assert not (failed := each_page(pages, check)), failed


def test_every_page_weighs_at_most_1_mb_uncompressed(seen, pages):
    """Everything a page load fetches (HTML, CSS, scripts, fonts, figures, the search index),
    counted as the bytes it decodes to, not the compressed bytes on the wire."""

    def check(path):
        visited = seen(path)
        sizes = {response.url: len(response.body()) for response in visited.responses}
        total = sum(sizes.values())
        if total <= PAGE_BUDGET_BYTES:
            return None
        heaviest = sorted(sizes.items(), key=lambda item: -item[1])[:4]
        return f"{total / 1e6:.2f} MB; heaviest: {heaviest}"

    assert not (failed := each_page(pages, check)), failed


def test_no_horizontal_scroll_on_a_phone(seen, pages):
    def check(path):
        page = seen(path, "phone").page
        scroll, client = page.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        if scroll <= client:
            return None
        culprits = page.evaluate(
            """(width) => {
            const clips = ["auto", "scroll", "hidden", "clip"];
            const scrolls = (el) => clips.includes(getComputedStyle(el).overflowX);
            const inScroller = (el) => {
              for (let up = el.parentElement; up; up = up.parentElement)
                if (scrolls(up)) return true;
              return false;
            };
            return [...document.body.querySelectorAll("*")]
              .filter((el) => el.getBoundingClientRect().right > width + 1 && !inScroller(el))
              .slice(0, 5)
              .map((el) => `${el.tagName}.${el.className}: ${el.textContent.slice(0, 60)}`);
          }""",
            client,
        )
        return f"{scroll} px wide in a {client} px viewport; too wide: {culprits}"

    assert not (failed := each_page(pages, check)), failed


def test_no_code_block_of_a_chapter_scrolls_sideways_at_1400_px(seen, pages):
    chapters = [path for path in pages if path.startswith("chapters/")]
    assert chapters, "the site has no chapter pages"

    def check(path):
        page = seen(path).page
        reveal_everything(page)
        return page.evaluate(
            """() => [...document.querySelectorAll("article pre > code")]
              .filter((code) => code.scrollWidth > code.clientWidth + 1)
              .map((code) => {
                const lines = code.textContent.split("\\n");
                const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
                return `${code.scrollWidth} px in ${code.clientWidth} px: ${longest.trim()}`;
              })"""
        )

    assert not (failed := each_page(chapters, check)), failed


# Text drawn in a figure, at its rendered size: an inline SVG's <text> scaled by the SVG's
# transform to the screen, and an SVG image's text scaled by the image's width over its
# viewBox. Hidden panels (a stepper shows one at a time) are skipped; they share one layout.
FIGURE_TEXT_SIZES = """async () => {
  const sizes = [];
  for (const svg of document.querySelectorAll("article svg")) {
    if (svg.getClientRects().length === 0) continue;
    for (const text of svg.querySelectorAll("text")) {
      const px = parseFloat(getComputedStyle(text).fontSize) * text.getScreenCTM().a;
      sizes.push([px, `inline: ${text.textContent.slice(0, 30)}`]);
    }
  }
  for (const img of document.querySelectorAll("article img[src*='.svg']")) {
    if (img.getClientRects().length === 0) continue;
    const svg = new DOMParser().parseFromString(
      await (await fetch(img.src)).text(), "image/svg+xml").documentElement;
    const scale = img.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    for (const text of svg.querySelectorAll("text")) {
      const size = /font-size:\\s*([\\d.]+)px/.exec(text.getAttribute("style") || "");
      sizes.push([size ? parseFloat(size[1]) * scale : 0, `${img.src}: ${text.textContent}`]);
    }
  }
  return sizes;
}"""


def test_figure_text_is_at_least_11_px_on_a_phone(seen, site_build):
    figures = sorted({*pages_with(site_build, "<svg"), *pages_with(site_build, ".svg")})
    assert figures, "no page has a figure"
    measured = {}

    def check(path):
        sizes = seen(path, "phone").page.evaluate(FIGURE_TEXT_SIZES)
        measured[path] = len(sizes)
        return [f"{px:.1f} px: {what}" for px, what in sizes if px < LEGIBLE_PX - 0.05][:5]

    assert not (failed := each_page(figures, check)), failed
    assert sum(measured.values()) > 50, f"too little figure text was found: {measured}"


# A word is broken when its pieces sit on two lines. A line may end after a hyphen or a slash
# (where the browser is allowed to wrap), so those end a word here. Formulas are skipped:
# KaTeX draws a formula as many positioned pieces, and keeps a hidden MathML copy.
BROKEN_WORDS = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll("article :is(td, th)")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest(".katex")) continue;
      for (const word of node.data.matchAll(/[^\\s\\-\\/]+[\\-\\/]?/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()]
          .filter((rect) => rect.width > 0).map((rect) => Math.round(rect.bottom)));
        if (lines.size > 1) broken.push(word[0]);
      }
    }
  }
  return broken.slice(0, 8);
}"""


@pytest.mark.parametrize("screen", ["desktop", "phone"])
def test_no_table_cell_breaks_a_word(seen, pages, screen):
    def check(path):
        page = seen(path, screen).page
        reveal_everything(page)
        return page.evaluate(BROKEN_WORDS)

    assert not (failed := each_page(pages, check)), failed


def test_no_script_holds_up_a_pages_first_paint(site_build):
    """overrides/main.html defers Material's scripts and ours, so the first paint can come first."""
    site = site_build[0]

    def check(path):
        body = (site / path / "index.html").read_text(encoding="utf-8").split("<body", 1)[1]
        # an empty src (mkdocs-jupyter's MathJax slot, unused here) fetches nothing, so waits
        # for nothing
        scripts = re.findall(r"<script\b[^>]*\bsrc=\"[^\"]+\"[^>]*>", body)
        return [tag for tag in scripts if not re.search(r"\s(defer|async)[\s>=]", tag)]

    assert not (failed := each_page(site_pages(site), check)), failed


# What Material's table rules set: a table's and a cell's own look, not a measure of layout
# (a width depends on the content). How words wrap is ours, and test_no_table_cell_breaks_a_word
# checks it.
TABLE_LOOK = [
    "display", "font-size", "background-color", "border-top", "border-radius", "max-width",
    "overflow-x", "padding-top", "padding-left", "font-weight", "text-align", "vertical-align",
    "min-width", "transition-duration",
]  # fmt: skip


def test_a_built_table_looks_as_a_table_material_mounted(seen, site_build):
    """hooks/tables.py writes tables as Material mounts them; they must look the same."""
    with_tables = pages_with(site_build, '<table class="course-table">')
    assert with_tables, "no page has a table"

    def check(path):
        return seen(path).page.evaluate(
            """(look) => {
            const differences = [];
            for (const built of document.querySelectorAll("article table.course-table")) {
              if (!built.matches(".md-typeset__scrollwrap > .md-typeset__table > table")) {
                differences.push("not inside Material's scroll wrapper");
              }
              const plain = built.cloneNode(true);  // what Material styles and mounts
              plain.removeAttribute("class");
              built.after(plain);
              for (const part of ["", " th", " td", " td code"]) {
                const [a, b] = [built, plain].map((t) => part ? t.querySelector(part) : t);
                if (!a) continue;
                const [sa, sb] = [a, b].map((e) => getComputedStyle(e));
                for (const name of look) {
                  const [va, vb] = [sa, sb].map((s) => s.getPropertyValue(name));
                  if (va !== vb) differences.push(`table${part} ${name}: ${va} vs ${vb}`);
                }
              }
              plain.remove();
            }
            return [...new Set(differences)];
          }""",
            TABLE_LOOK,
        )

    assert not (failed := each_page(with_tables, check)), failed


@pytest.mark.parametrize("screen", ["desktop", "phone"])
def test_axe_finds_no_serious_or_critical_violation(seen, pages, screen):
    axe = npm_tool("axe-core") / "axe.min.js"

    def check(path):
        page = seen(path, screen).page
        page.add_script_tag(path=str(axe))
        violations = page.evaluate(
            """async () => (await axe.run(document, { resultTypes: ["violations"] }))
                 .violations.filter((v) => ["serious", "critical"].includes(v.impact))
                 .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3)
                   .map((n) => n.target.join(" ")).join(", ")}`)"""
        )
        return violations

    assert not (failed := each_page(pages, check)), failed


def test_a_code_block_in_a_closed_fold_gets_focus_when_the_fold_opens(visit):
    """a11y.js measures a closed fold's code when it opens, and the focus it gives stays.

    Measuring every fold while the page loaded made a phone lay each one out, most of a long
    page's blocking time. Material mounts a block once it comes into view and, on a screen
    without hover, takes its focus away.
    """
    page = visit(GLOO, **PHONE).page
    closed = page.locator("article details:not([open])", has=page.locator("pre > code"))
    fold = closed.first.element_handle()  # a handle: once open, the locator finds another
    code = fold.query_selector("pre > code")
    assert code.get_attribute("tabindex") is None, "a closed fold was measured on load"
    fold.query_selector("summary").click()
    code.scroll_into_view_if_needed()
    page.wait_for_function(MOUNTED, arg=code)
    assert code.get_attribute("tabindex") == "0", "an opened fold's wide code takes no focus"


# ---------------------------------------------------------------------------------------------
# Lighthouse: calibrated to this machine, judged beside plain Material (lighthouse_gate.py)
# ---------------------------------------------------------------------------------------------
REFERENCE = "plain-material/"  # the reference page, served beside the site
# The heaviest chapter (its table of collectives was over a thousand elements of KaTeX's HTML):
# what Material alone makes of our weightiest content is the bar for every page.
REFERENCE_MARKDOWN = ROOT / "docs" / "chapters" / "02-collectives.md"
# Work for the busy copy below: a count of steps, not a wait on the clock. The gate reads the
# main thread's CPU time, and a loop that spins until 2 s have passed burns less of it whenever
# another process takes the core (beside the suite's other half, 2-3x less). This many steps
# take about 2 s of CPU time on the CI machine (4.4 ns a step in node's V8, measured under load:
# CPU time does not stretch), 4-6x the reference's, whatever shares the core.
BUSY_STEPS = 450_000_000
# Two copies of chapter 3 broken on purpose, at its depth so that its relative links still work:
# the gate must fail each of them.
BROKEN = {
    "chapters/broken-busy/": f"<script>let x = 0; for (let i = 0; i < {BUSY_STEPS}; i++)"
    " x = (x * 31 + i) % 1000003; window.busy = x;</script>",
    "chapters/broken-dom/": '<div class="bloat">' + "<span>.</span>" * 5000 + "</div>",
}
LIGHTHOUSE_RUN_S = 60  # one run's limit, at pace's reference machine (a run takes seconds)
# How long Lighthouse waits for a page's first paint and for its load before it gives up on it:
# its own defaults, written for a machine like pace's reference, stretched like every limit.
LIGHTHOUSE_WAITS_S = {"maxWaitForFcp": 30, "maxWaitForLoad": 45}


def plain_material(folder):
    """Build the reference: chapter 2's Markdown by Material alone, with our theme and Markdown
    settings but none of our hooks, templates, scripts or stylesheets."""
    ours = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    theme = {key: value for key, value in ours["theme"].items() if key != "custom_dir"}
    theme["font"] = False  # BaseLoader reads every value as a string
    extensions = [  # snippets would include our own files
        extension
        for extension in ours["markdown_extensions"]
        if "pymdownx.snippets" not in extension
    ]
    config = {
        "site_name": "Plain Material",
        "theme": theme,
        "plugins": ["search"],
        "markdown_extensions": extensions,
        # The chapter's links lead to pages this one-page site does not have.
        "validation": {"links": {"not_found": "info", "anchors": "info"}},
    }
    docs = folder / "docs"
    docs.mkdir(parents=True)
    shutil.copy(REFERENCE_MARKDOWN, docs / "index.md")
    (folder / "mkdocs.yml").write_text(json.dumps(config))
    proc = mkdocs_build(folder / "mkdocs.yml", folder / "site", folder / "cache", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return folder / "site"


@pytest.fixture(scope="module")
def lighthouse_extras(site_build, tmp_path_factory):
    """{URL path: folder} served beside the site: the reference, and the broken copies."""
    work = tmp_path_factory.mktemp("lighthouse-pages")
    extras = {REFERENCE: plain_material(work / "reference")}
    chapter = (site_build[0] / "chapters" / "03-ddp" / "index.html").read_text(encoding="utf-8")
    for path, breakage in BROKEN.items():
        folder = work / path.strip("/").replace("/", "-")
        folder.mkdir()
        (folder / "index.html").write_text(chapter.replace("</body>", breakage + "</body>"))
        extras[path] = folder
    return extras


def run_lighthouse(plan, guarded_folder):
    """Run `plan` ([(url, categories, multiplier)]) in one Chromium; the reports, in order."""
    npm_tool("lighthouse")
    work = pathlib.Path(tempfile.mkdtemp(prefix="lh-", dir=guarded_folder))
    runs = [
        {
            "url": url,
            "categories": categories,
            "cpuSlowdownMultiplier": multiplier,
            "out": str(work / f"{i}.json"),
        }
        for i, (url, categories, multiplier) in enumerate(plan)
    ]
    (work / "plan.json").write_text(
        json.dumps(
            {
                "modules": str(NPM_DIR / "node_modules"),
                "chrome": str(CHROMIUM),
                "flags": HEADLESS_FLAGS,
                "profile": str(work / "profile"),
                "waits": {
                    name: pace.limit(wait) * 1000 for name, wait in LIGHTHOUSE_WAITS_S.items()
                },
                "runs": runs,
            }
        )
    )
    command = [
        "node",
        str(pathlib.Path(__file__).parents[1] / "tools" / "lighthouse_runs.mjs"),
        str(work / "plan.json"),
    ]
    proc = subprocess.Popen(
        command,
        env=dict(os.environ, TMPDIR=str(work)),  # where Chromium keeps its singleton socket
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    limit = pace.limit(LIGHTHOUSE_RUN_S * len(plan))
    try:
        _, stderr = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"Lighthouse ran past {limit:.0f} s for {len(plan)} runs")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"Lighthouse failed: {stderr[-2000:]}"
    reports = [json.loads(pathlib.Path(run["out"]).read_text()) for run in runs]
    shutil.rmtree(work)
    return reports


@pytest.fixture(scope="module")
def lighthouse_verdicts(served, pages, guarded_folder):
    """{page: (its pairs of measurements, why it fails)}, for our pages and the broken ones.

    Three runs of the reference measure the host and set the multiplier; then each page runs
    right after a run of the reference (steadied by its neighbours), and a page not well within
    the limit gets more pairs, gate.MAX_PAIRS in all (site_tests/tools/lighthouse_gate.py).
    """
    calibration = run_lighthouse([(served + REFERENCE, ["performance"], None)] * 3, guarded_folder)
    # The median of three: a fresh Chromium's first run can measure a fraction of the host.
    index = statistics.median(report["environment"]["benchmarkIndex"] for report in calibration)
    multiplier = gate.calibrated_multiplier(index)
    everything = ["performance", "accessibility", "best-practices"]
    pairs = {path: [] for path in [*pages, *BROKEN]}
    todo = list(pairs)
    while todo:
        plan = []
        for path in todo:
            plan += [
                (served + REFERENCE, ["performance"], multiplier),
                (served + path, everything, multiplier),
            ]
        measured = [gate.measured(report) for report in run_lighthouse(plan, guarded_folder)]
        references = gate.steadied(measured[0::2])
        for path, reference, page in zip(todo, references, measured[1::2], strict=True):
            pairs[path].append((reference, page))
        todo = [path for path in todo if gate.needs_another_pair(pairs[path])]
    verdicts = {path: (found, gate.problems(found)) for path, found in pairs.items()}
    write_lighthouse_report(index, multiplier, verdicts)
    return verdicts


def write_lighthouse_report(index, multiplier, verdicts):
    """artifacts/lighthouse.md (a table a person reads; the suite's summary prints it) and .json."""
    ARTIFACTS.mkdir(exist_ok=True)
    lines = [
        f"Lighthouse (mobile), calibrated: benchmarkIndex {index:.0f} -> "
        f"cpuSlowdownMultiplier {multiplier:.2f}; goal: performance >= {gate.GOAL_SCORE}",
        "",
        "| page | score | TBT ms, page/reference | TBT ratio | main-thread ratio "
        "| main-thread CPU ms, page/reference | CPU ratio (gated) | pairs | DOM | bytes "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path, (found, why) in verdicts.items():
        page = found[-1][1]
        ratio = gate.ratios(found)
        score = statistics.median(p["scores"]["performance"] for _, p in found)
        sides = list(zip(*found, strict=True))  # (the references, the page's runs)
        tbt, cpu = (
            [statistics.median(run[name] for run in side) for side in sides]
            for name in ("tbt", "main_thread_cpu")
        )
        lines.append(
            f"| {path or 'home'} | {score:.2f} | {tbt[1]:.0f}/{tbt[0]:.0f} "
            f"| {ratio['tbt']:.2f} | {ratio['main_thread']:.2f} "
            f"| {cpu[1]:.0f}/{cpu[0]:.0f} | {ratio['main_thread_cpu']:.2f} "
            f"| {len(found)} | {page['dom']:.0f} | {page['bytes']:.0f} "
            f"| {'; '.join(why) or 'pass'} |"
        )
    gate.summary[:] = lines
    (ARTIFACTS / "lighthouse.md").write_text("\n".join(lines) + "\n")
    (ARTIFACTS / "lighthouse.json").write_text(json.dumps(verdicts, indent=1))


def test_lighthouse_every_page_within_the_gate(lighthouse_verdicts, pages):
    def check(path):
        return lighthouse_verdicts[path][1]

    assert not (failed := each_page(pages, check)), failed


@pytest.mark.parametrize("path", list(BROKEN))
def test_lighthouse_gate_fails_a_page_broken_on_purpose(lighthouse_verdicts, path):
    why = lighthouse_verdicts[path][1]
    expected = gate.GATED if "busy" in path else "DOM elements"
    assert any(expected in reason for reason in why), f"{path} passed the gate: {why}"


def naming(folder):
    """{pid: command line} of every process whose command line names `folder`."""
    return {pid: " ".join(argv) for pid, argv in processes_naming(str(folder)).items()}


def in_groups(groups):
    """{pid: command line} of every live process (a zombie is dead) in one of `groups`."""
    found = {}
    for proc in psutil.process_iter(["status", "cmdline"]):
        # psutil has no process group: os.getpgid, which fails for one ended since it was listed
        with contextlib.suppress(ProcessLookupError):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) in groups:
                found[proc.pid] = " ".join(proc.info["cmdline"] or ())
    return found


def absent(wanted, lines):
    """The names in `wanted` ({name: words}) whose words no command line in `lines` holds."""
    return [
        name
        for name, words in wanted.items()
        if not any(all(word in line for word in words) for line in lines.values())
    ]


def groups_of(pids):
    """The process groups of `pids`. A process may end between being listed and being asked
    (Lighthouse opens and closes a renderer per page): an ended one has no group to add."""
    groups = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    return groups


@pytest.fixture
def short_tmp():
    """A temporary folder with a short path (Chromium keeps a Unix socket deep inside): in the
    system's temp folder, not in this session's guarded one."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="kill-", dir=START_TMP))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_killed_session_leaves_no_server_browser_or_folder(site_build, short_tmp):
    """Kill a browser test session with SIGKILL while nginx, Playwright's Chromium and a
    Lighthouse batch are all running, as CI kills a run at its time limit: nothing it started
    may outlive it, nor the folders they used."""
    npm_tool("lighthouse")  # the session below waits for a Lighthouse batch
    env = dict(os.environ, TMPDIR=str(short_tmp), SITE_DIR=str(site_build[0]))
    env["LAB_CACHE_DIR"] = str(site_build[1])
    selected = "closed_fold or every_page_within_the_gate"  # the browser, then Lighthouse
    log = short_tmp / "session.log"
    with log.open("w") as output:
        session = subprocess.Popen(
            [sys.executable, "-m", "pytest", __file__, "-k", selected, "-p", "no:cacheprovider"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wanted = {  # words that each one's command line shows
        "nginx": ("nginx: master",),
        "Playwright's Chromium": ("chromium", "playwright_chromiumdev_profile"),
        "Lighthouse": ("node", "lighthouse_runs.mjs"),
        "Lighthouse's Chromium": ("chromium", "/lh-"),
    }
    deadline = time.monotonic() + pace.limit(120)
    try:
        while (missing := absent(wanted, naming(short_tmp))) and time.monotonic() < deadline:
            assert session.poll() is None, f"the session ended early:\n{log.read_text()}"
            time.sleep(0.2)
        assert not missing, f"never started: {missing}\n{log.read_text()[-3000:]}"
        groups = groups_of(naming(short_tmp)) - {os.getpgid(0)}
    finally:
        os.killpg(session.pid, signal.SIGKILL)  # the whole process group, as CI does
        session.wait()
    deadline = time.monotonic() + pace.limit(10)
    while (naming(short_tmp) or in_groups(groups)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert naming(short_tmp) == {}, "outlived the killed session"
    assert in_groups(groups) == {}, "outlived the killed session (an nginx worker, say)"
    assert not list(short_tmp.glob("guarded-*")), "a guarded folder is left"


def test_screenshots_for_a_person(seen, pages):
    ARTIFACTS.mkdir(exist_ok=True)
    for path in pages:
        for screen in ("desktop", "phone"):
            name = (path.strip("/").replace("/", "-") or "home") + f"-{screen}"
            target = ARTIFACTS / f"{name}.png"
            seen(path, screen).page.screenshot(path=str(target), full_page=True)
            assert target.stat().st_size > 10_000


# ---------------------------------------------------------------------------------------------
# Math, search, the calculator
# ---------------------------------------------------------------------------------------------
def test_math_is_typeset(seen, site_build):
    with_math = pages_with(site_build, 'class="arithmatex"')
    assert with_math, "no page has math"

    def check(path):
        page = seen(path).page
        reveal_everything(page)
        left = page.evaluate(
            """() => {
            const article = document.querySelector("article").cloneNode(true);
            const raw = [...article.querySelectorAll(".arithmatex")]
              .filter((el) => !el.querySelector(".katex")).map((el) => el.textContent);
            article.querySelectorAll("pre, code, .katex").forEach((el) => el.remove());
            const text = article.textContent;
            const delimiters = ["\\\\(", "\\\\)", "\\\\[", "\\\\]"].filter((d) => text.includes(d));
            return [...raw.slice(0, 3), ...delimiters];
          }"""
        )
        if page.locator(".katex-error").count():
            left.append("a formula KaTeX could not parse")
        return left

    assert not (failed := each_page(with_math, check)), failed


def test_no_page_runs_katex(seen, pages):
    """Math is typeset when the site is built: no page fetches KaTeX's script (270 KB)."""

    def check(path):
        return [url for url in seen(path).requests if "katex" in url and url.endswith(".js")]

    assert not (failed := each_page(pages, check)), failed


# Material searches each time a key is let go, and its worker answers the queries in turn: the
# list shows the results of "no", then "no_s", before those of "no_sync". With search.highlight,
# a result's link carries the terms it matched (?h=), so the list for the whole query is the
# one with a link that matched all of it.
RESULTS_FOR = """(query) => [...document.querySelectorAll(".md-search-result__item a")]
  .some((link) => new URL(link.href).searchParams.get("h") === query)"""


def test_search_finds_no_sync(visit):
    home = visit("").page
    open_search(home)
    # typed key by key, as a reader would: Material reads the query on keyboard events
    home.locator("input.md-search__input").press_sequentially("no_sync", delay=20)
    # the worker indexes the site first
    home.wait_for_function(RESULTS_FOR, arg="no_sync", timeout=pace.limit(30) * 1000)
    results = home.locator(".md-search-result__item")
    links = [
        results.nth(i).locator("a").first.get_attribute("href") for i in range(results.count())
    ]
    assert any("chapters/" in link for link in links), links
    assert "no_sync" in home.locator(".md-search-result").inner_text()


def error_index(site):
    """(messages, section anchors) of the gallery's error index, as the build wrote them."""
    markup = (site / "failures" / "index.html").read_text(encoding="utf-8")
    part = markup.split('id="find-your-error-message"', 1)[1].split("<h2 ", 1)[0]
    blocks = re.findall(r'<div class="[^"]*error-message highlight"><pre>(.*?)</pre>', part, re.S)
    lines = (html.unescape(re.sub(r"<[^>]+>", "", block)).splitlines() for block in blocks)
    messages = dict.fromkeys(line for block in lines for line in block if line.strip())
    return list(messages), re.findall(r'<h3 id="([^"]+)"', part)


class SearchBox:
    """The site's search box, used as a reader with an error uses it: paste a line, look at the
    first result."""

    def __init__(self, page):
        self.page = page
        open_search(page)
        self.box = page.locator("input.md-search__input")
        self.results = page.locator(".md-search-result__item")

    def first(self, text):
        """(page path, section anchor) of the first result for `text` pasted whole."""
        self.box.fill("")
        self.box.press("End")
        self.results.first.wait_for(state="detached", timeout=pace.limit(10) * 1000)
        self.box.fill(text)  # pasted whole; Material searches when the key of the paste is let go
        self.box.press("End")
        try:  # the worker indexes the site on first use
            self.results.first.wait_for(timeout=pace.limit(30) * 1000)
        except playwright_api.TimeoutError:
            said = self.page.locator(".md-search-result__meta").inner_text()
            raise AssertionError(f"no result for {text!r}; the search says {said!r}") from None
        # the first page found, then its best sections
        page, best, *_ = [a.get_attribute("href") for a in self.results.first.locator("a").all()]
        return urlsplit(page).path, urlsplit(best).fragment


def test_a_pasted_error_finds_its_gallery_section_first(visit, site_build):
    """Each message the gallery's runs print finds the gallery's index first, or the error
    index's entry for the same message (docs/errors/: the entry whose `expect` it matches)."""
    messages, anchors = error_index(site_build[0])
    assert len(messages) >= 8 and len(anchors) >= 8, (messages, anchors)
    corpus, entries = error_entries_hook.load_corpus(ROOT), error_entries()
    search = SearchBox(visit("").page)
    missed = {}
    for message in messages:
        found = search.first(message)
        same_error = {
            entries[error_id]
            for error_id, entry in corpus.items()
            if "expect" in entry and error_entries_hook.expected(entry, None).search(message)
        }
        if not (found[0] == "/failures/" and found[1] in anchors) and found not in same_error:
            missed[message] = found
    assert not missed, missed


def error_entries():
    """{error id: (page path, heading anchor)} for each entry of the error index's pages."""
    found = {}
    for source in sorted((ROOT / "docs" / "errors").glob("*.md")):
        markdown = source.read_text(encoding="utf-8")
        for marker in error_entries_hook.MARKER.finditer(markdown):
            heading = re.findall(r"^### (.+)$", markdown[: marker.start()], re.M)[-1]
            path = f"/errors/{source.stem}/"
            found[marker["id"]] = (path, slugify(heading.replace("`", ""), "-"))
    return found


HIT_RATE_FLOOR = 0.95


def test_a_pasted_error_line_finds_its_entry_first(visit, site_build):
    """Every line of the error corpus, as a user pasted it and with the user's own names,
    numbers, addresses and paths changed, brings its entry first: at least 95 % of each."""
    corpus = error_entries_hook.load_corpus(ROOT)
    entries = error_entries()
    search = SearchBox(visit("errors/find/").page)
    hits, missed = {"pasted": 0, "variant": 0}, []
    threads = [(error_id, t) for error_id, entry in corpus.items() for t in entry["threads"]]
    for error_id, thread in threads:
        for kind in hits:
            found = search.first(thread[kind])
            if found == entries[error_id]:
                hits[kind] += 1
            else:
                missed.append(f"{kind} {thread[kind][:100]!r}: {error_id} -> {found}")
    rates = {kind: hit / len(threads) for kind, hit in hits.items()}
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "error-search.md").write_text(
        f"First result is the entry, over {len(threads)} corpus lines:\n"
        + "".join(f"- {kind}: {hits[kind]} ({rates[kind]:.0%})\n" for kind in hits)
        + "".join(f"- missed: {line}\n" for line in missed)
    )
    assert min(rates.values()) >= HIT_RATE_FLOOR, (rates, missed)


def scaling_fence():
    """The Python block of the pages that defines allreduce_seconds, run here for its values."""
    fences = [
        body
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for body in re.findall(
            r"^```python[^\n]*\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M
        )
        if "def allreduce_seconds(" in body
    ]
    (source,) = fences
    names = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    assert {"allreduce_seconds", "step_compute_seconds", "backward_seconds"} <= names
    namespace = {}
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its table; we want its values
        exec(compile(source, "scaling model", "exec"), namespace)
    return namespace


def calculator_values(page, fields):
    form = page.locator("form[data-scaling-calculator]")
    for name, value in fields.items():
        form.locator(f"input[name={name}]").fill(repr(value))
    outputs = form.locator("output")
    return {
        outputs.nth(i).get_attribute("name"): (
            outputs.nth(i).get_attribute("data-value"),
            outputs.nth(i).inner_text(),
        )
        for i in range(outputs.count())
    }


@pytest.fixture(scope="module")
def calculator_page(site_build):
    return one_page_with(site_build, "data-scaling-calculator")


def test_calculator_gives_the_fences_numbers(visit, calculator_page):
    """The page's example at 16 K tokens per GPU (hidden) and at 1 K (not), JS against Python."""
    fence = scaling_fence()
    P, S, world, bus, flops = (fence[k] for k in ("P", "S", "WORLD", "BUS", "FLOPS"))
    example = {
        "params": P,
        "bytesPerGrad": S / P,
        "gpus": world,
        "busGBps": bus / 1e9,
        "tflops": flops / 1e12,
    }
    page = visit(calculator_page).page
    form = page.locator("form[data-scaling-calculator]")
    starts_at = {name: float(form.locator(f"input[name={name}]").input_value()) for name in example}
    assert starts_at == example, "the calculator should open on the page's example"
    for tokens in (16 * 1024, 1024):
        shown = calculator_values(page, {**example, "tokens": tokens})
        allreduce = fence["allreduce_seconds"](S, world, bus)
        step = fence["step_compute_seconds"](P, tokens, flops)
        backward = fence["backward_seconds"](P, tokens, flops)
        expected = {
            "allreduce": allreduce,
            "step": step,
            "backward": backward,
            "ratio-step": allreduce / step,
            "ratio-backward": allreduce / backward,
            "hidden": 1.0 if allreduce <= backward else 0.0,
            "state": fence["training_state_bytes"](P),
        }
        for name, want in expected.items():
            got = float(shown[name][0])
            assert math.isclose(got, want, rel_tol=1e-12), (tokens, name, got, want)
        assert shown["allreduce"][1] == milliseconds_as_shown(allreduce)
        assert shown["hidden"][1].startswith("yes" if allreduce <= backward else "no")


def milliseconds_as_shown(seconds):
    """The calculator's format: thousands separated, at most 1 decimal (2 under 10 ms)."""
    ms = seconds * 1e3
    return f"{ms:,.{2 if ms < 10 else 1}f}".rstrip("0").rstrip(".") + " ms"


def test_calculator_refuses_nonsense(visit, calculator_page):
    page = visit(calculator_page).page
    shown = calculator_values(page, {"gpus": 2.5})
    assert all(value is None for value, _ in shown.values())
    assert "positive" in page.locator("[data-calculator-message]").inner_text()


# ---------------------------------------------------------------------------------------------
# The figures
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stepper_page(site_build):
    return one_page_with(site_build, "data-stepper")


def test_ring_stepper_steps_with_buttons_and_keys(visit, stepper_page):
    page = visit(stepper_page).page
    stepper = page.locator("[data-stepper]").first
    panels = stepper.locator(":scope > figure")
    count = panels.count()
    assert count >= 3

    def visible():
        return [i for i in range(count) if panels.nth(i).is_visible()]

    previous, following = (
        stepper.locator("[data-stepper-prev]"),
        stepper.locator("[data-stepper-next]"),
    )
    assert visible() == [0] and previous.is_disabled()
    following.click()
    assert visible() == [1]
    assert stepper.locator(".fig-stepper__status").inner_text() == f"Step 1 of {count - 1}"
    following.press("ArrowRight")
    assert visible() == [2]
    previous.click()
    assert visible() == [1]
    while following.is_enabled():
        following.click()
    assert visible() == [count - 1] and following.is_disabled()


# Material eases a button's colours over 125 ms; read them once its transitions end.
LOOK = """async (button) => {
  await Promise.all(button.getAnimations().map((transition) => transition.finished));
  const style = getComputedStyle(button);
  return [style.color, style.backgroundColor, style.borderStyle, style.cursor];
}"""


def test_a_disabled_stepper_button_looks_disabled(visit, stepper_page):
    page = visit(stepper_page).page
    stepper = page.locator("[data-stepper]").first
    previous, following = (
        stepper.locator("[data-stepper-prev]"),
        stepper.locator("[data-stepper-next]"),
    )
    assert previous.is_disabled()
    disabled = previous.evaluate(LOOK)
    following.click()
    assert previous.is_enabled()
    page.mouse.move(0, 0)  # no hover on either
    enabled = previous.evaluate(LOOK)
    assert disabled[3] == "not-allowed" and enabled[3] != "not-allowed"
    assert disabled[0] != enabled[0], "a disabled button's label looks like an enabled one's"
    assert disabled[2] != enabled[2], "a disabled button's outline looks like an enabled one's"


def test_ring_stepper_has_a_key_to_its_outlines(seen, stepper_page):
    """The key names what the panels draw: dashed and thick outlines, the two fills."""
    page = seen(stepper_page).page
    key = page.locator("[data-stepper] .fig-key").first
    words = key.inner_text()
    for meaning in ("dashed", "thick", "complete sum", "send"):
        assert meaning in words, f"the ring's key does not explain {meaning!r}: {words}"
    # each entry's swatch is drawn with the panels' classes, so the key cannot drift from them
    assert key.locator("rect.sent").count() == 1 and key.locator("rect.got").count() == 1
    assert key.locator("rect.done").count() == 1


def test_overlap_timeline_has_a_key_and_labels_every_layer(seen, site_build):
    page = seen(one_page_with(site_build, "fig-timeline")).page
    figure = page.locator("figure.fig-overlap").first
    words = figure.locator(".fig-key").inner_text()
    assert "gradients" in words and "all_reduce" in words and "step ends" in words, words
    drawing = figure.locator("svg.fig-timeline")
    labels = drawing.locator("text").evaluate_all("(texts) => texts.map((t) => t.textContent)")
    layers = [label for label in labels if re.fullmatch(r"L\d+", label)]
    bars = drawing.locator("rect.fig-bar--compute").count()
    assert len(layers) == bars, f"{bars} backward bars but layer labels {layers}"


def test_ring_stepper_without_javascript_shows_every_step(visit, stepper_page):
    page = visit(stepper_page, java_script_enabled=False).page
    panels = page.locator("[data-stepper] > figure")
    assert panels.count() >= 3
    assert all(panels.nth(i).is_visible() for i in range(panels.count()))
    assert not page.locator(".fig-stepper__controls").is_visible()


def test_dark_palette_toggles_and_figures_follow_it(visit, stepper_page, site_build):
    scheme = "document.body.getAttribute('data-md-color-scheme')"
    figure_colour = "getComputedStyle(document.querySelector('.fig-ring')).color"
    page = visit(stepper_page).page
    assert page.evaluate(scheme) == "default"
    light = page.evaluate(figure_colour)
    page.locator("form[data-course-palette] label:visible").first.click()
    assert page.evaluate(scheme) == "slate"
    assert page.evaluate(figure_colour) != light, "the figures ignore the palette"

    # The sweep plot is an image: one rendering per palette, the other one hidden.
    sweep = visit(one_page_with(site_build, "allreduce-sweep-dark.svg")).page
    shown = "[...document.querySelectorAll('.fig-sweep img')].filter((i) => i.offsetWidth)"
    (src,) = sweep.evaluate(f"{shown}.map((i) => i.src)")
    assert src.endswith("allreduce-sweep.svg#only-light"), src
    sweep.locator("form[data-course-palette] label:visible").first.click()
    assert sweep.evaluate(scheme) == "slate"
    (src,) = sweep.evaluate(f"{shown}.map((i) => i.src)")
    assert src.endswith("allreduce-sweep-dark.svg#only-dark"), src


# A listener of ours on the system's scheme, made after the palette's own: a document reports a
# media query's change to its lists oldest first, all in one step (CSSOM View, "evaluate media
# queries and report changes"), so once ours has heard of a change, the palette has too.
HEAR_THE_SYSTEM = """() => {
  window.systemDark = [];
  window.systemQuery = matchMedia("(prefers-color-scheme: dark)");
  window.systemQuery.addEventListener("change", (event) => window.systemDark.push(event.matches));
}"""


def system_turns(page, scheme):
    """Switch the system's scheme, and wait until the page has been told (HEAR_THE_SYSTEM): a
    change comes in a later step, and two switches before it would come as none."""
    page.emulate_media(color_scheme=scheme)
    page.wait_for_function("(dark) => window.systemDark.at(-1) === dark", arg=scheme == "dark")


def test_the_palette_follows_the_system_until_the_reader_chooses(visit):
    """overrides/partials/palette.html does the work of Material's palette component."""
    scheme = "document.body.getAttribute('data-md-color-scheme')"
    toggle = "form[data-course-palette] label:visible"
    page = visit("", color_scheme="dark").page
    assert page.evaluate(scheme) == "slate", "a dark system got the light palette"
    assert page.evaluate("document.querySelector('meta[name=color-scheme]').content") == "dark"
    assert page.locator(toggle).get_attribute("title") == "Switch to light mode"

    page.emulate_media(color_scheme="light")  # the media query's change event comes later
    page.wait_for_function(
        f"{scheme} === 'default'", timeout=pace.limit(2) * 1000
    )  # no choice made yet
    page.emulate_media(color_scheme="dark")
    page.wait_for_function(f"{scheme} === 'slate'", timeout=pace.limit(2) * 1000)
    page.locator(toggle).click()
    assert page.evaluate(scheme) == "default"
    page.reload()
    assert page.evaluate(scheme) == "default", "the reader's choice is forgotten on reload"
    page.evaluate(HEAR_THE_SYSTEM)
    system_turns(page, "light")
    system_turns(page, "dark")  # a palette still following the system would be slate now
    assert page.evaluate(scheme) == "default", "the system overrode the reader's choice"


# ---------------------------------------------------------------------------------------------
# The lab pages
# ---------------------------------------------------------------------------------------------
def lab_record(cache, name):
    """The record of mkdocs.yml's run `name` for the sources as they stand: the one with their
    cache key. A long-lived cache (SITE_DIR's) holds older runs too, and which record was
    written last says nothing of which the site shows (an edit undone reuses an older one)."""
    key = labrunner.LabRun(name, declared()["lab_runs"][name], ROOT).cache_key()
    records = [json.loads(path.read_text()) for path in cache.glob(f"{name}-*/record.json")]
    found = [record for record in records if record["key"] == key]
    assert found, f"{cache} has no record of {name!r} for the sources as they stand: rebuild"
    return found[0]


GLOO = "labs/ddp-gloo/"


def test_gloo_lab_page_shows_its_output_and_folds_its_provenance(visit, site_build):
    _, cache = site_build
    record = lab_record(cache, "gloo")
    page = visit(GLOO).page
    text = re.sub(r"\s+", " ", page.locator("article").inner_text())
    for line in record["stdout"].strip().splitlines():
        assert re.sub(r"\s+", " ", line).strip() in text, f"printed line missing: {line!r}"
    assert " ".join(record["command"]) in text
    # One line in view: torch, date, machine. The rest one click away, not in the way.
    line = page.locator(".lab-provenance").first.inner_text()
    for fact in (record["started_utc"], record["result"]["env"]["torch"]):
        assert fact in line, f"provenance {fact!r} missing from the visible line: {line}"
    assert record["git_commit"] not in text, "the provenance facts are not folded"
    fold = page.locator("details", has_text="Provenance of this run").first
    fold.locator("summary").click()
    assert record["git_commit"] in fold.inner_text()


def test_gloo_lab_page_shows_the_ddp_code_before_the_script(seen):
    page = seen(GLOO).page
    titles = page.locator("article .highlight > .filename").all_inner_texts()
    ddp_first = next(i for i, title in enumerate(titles) if "ddp_common.py:" in title)
    script = next(i for i, title in enumerate(titles) if title.endswith("gloo.py"))
    assert ddp_first < script, titles
    # the script, with its argparse and forkserver, is folded
    assert page.locator("details:has(.filename:text-is('code/ddp/gloo.py'))").count() == 1


# ---------------------------------------------------------------------------------------------
# Reference material on a phone: what a reader at 390 px cannot read is measured, not guessed
# ---------------------------------------------------------------------------------------------
# Where `el` sits in a box that scrolls sideways: the box, its hidden width, and whether it
# shows that it scrolls (extra.css: a shadow that stays with the box, under covers that scroll
# with the content). `null` when nothing around `el` is cut off.
CUT_OFF = """
const cutOff = (el) => {
  for (let box = el; box && box.tagName !== "ARTICLE"; box = box.parentElement) {
    if (!["auto", "scroll"].includes(getComputedStyle(box).overflowX)) continue;
    const hidden = box.scrollWidth - box.clientWidth;
    if (hidden <= 1) continue;
    const style = getComputedStyle(box);
    const hint = style.backgroundImage.includes("gradient")
      && style.backgroundAttachment.includes("local");
    return {hidden, hint, box: `${box.tagName}.${box.className}`};
  }
  return null;
};
"""
CELL_CHARS = 8  # a cell holding more text than this is at least this many letters wide


def test_table_cells_on_a_phone_are_wide_enough_to_read(seen, site_build):
    """The cheat sheet's "What it does" came out one or two letters a line; chapter 6's failure
    table ran 1,045 px wide, its Rule and Fix off the screen with no sign they were there."""
    with_tables = pages_with(site_build, "<table")
    assert "cheatsheet/" in with_tables and "chapters/06-debugging/" in with_tables

    def check(path):
        page = seen(path, "phone").page
        reveal_everything(page)
        return page.evaluate(
            CUT_OFF
            + """(chars) => {
            const found = [];
            for (const cell of document.querySelectorAll("article table :is(td, th)")) {
              if (cell.getClientRects().length === 0) continue;
              const hidden = cell.closest("thead");  // a card shows the heading in each cell
              if (hidden && getComputedStyle(hidden).clipPath !== "none") continue;
              // the text a reader sees: a formula's MathML copy for screen readers left out
              // (KaTeX's HTML), and the TeX a MathML formula keeps but does not show
              const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
              let text = "";
              for (let n = walker.nextNode(); n; n = walker.nextNode()) {
                if (!n.parentElement.closest(".katex-mathml, annotation")) text += n.data;
              }
              text = text.replace(/\\s+/g, " ").trim();
              const style = getComputedStyle(cell);
              const width = cell.clientWidth - parseFloat(style.paddingLeft)
                - parseFloat(style.paddingRight);
              const letter = parseFloat(style.fontSize) / 2;  // an average letter, about
              if (text.length > chars && width < chars * letter) {
                found.push(`${Math.round(width / letter)} letters wide: ${text.slice(0, 40)}`);
              }
            }
            for (const table of document.querySelectorAll("article table")) {
              const cut = cutOff(table);
              if (cut && !cut.hint) {
                const head = table.querySelector("th, td").innerText.trim().slice(0, 30);
                found.push(`a table (${head}...) hides ${cut.hidden} px with no hint`);
              }
            }
            return found.slice(0, 6);
          }""",
            CELL_CHARS,
        )

    assert not (failed := each_page(with_tables, check)), failed


# The display formulas a reader reported cut off: they must fit a phone outright.
MUST_FIT = {"chapters/03-ddp/": "\\nabla L", "chapters/07-scaling/": "t_{\\text{all-reduce}}"}


def test_display_equations_fit_a_phone_or_show_that_they_scroll(seen, site_build):
    with_math = pages_with(site_build, 'class="katex-display"')
    assert set(MUST_FIT) <= set(with_math), with_math

    def check(path):
        page = seen(path, "phone").page
        reveal_everything(page)
        found = page.evaluate(
            CUT_OFF
            + """(mustFit) => {
            const found = [];
            for (const display of document.querySelectorAll("article .katex-display")) {
              if (display.getClientRects().length === 0) continue;
              const tex = display.querySelector("annotation").textContent;
              const cut = cutOff(display);
              if (!cut) continue;
              if (!cut.hint) found.push(`${cut.hidden} px cut off, no hint: ${tex.slice(0, 50)}`);
              else if (mustFit && tex.includes(mustFit)) {
                found.push(`${cut.hidden} px to scroll: ${tex.slice(0, 50)}`);
              }
            }
            return found;
          }""",
            MUST_FIT.get(path),
        )
        return found

    assert not (failed := each_page(with_math, check)), failed


def test_no_command_diff_or_output_line_is_cut_off_on_a_phone(seen, pages):
    """Chapter 1's torchrun line and its diff ended off the screen. Commands and what a run
    printed wrap; code that scrolls (Python, diffs, blocks whose lines are columns keep their
    lines) shows that it does."""

    def check(path):
        page = seen(path, "phone").page
        reveal_everything(page)
        return page.evaluate(
            CUT_OFF
            + """() => {
            const found = [];
            const wraps = ".language-bash, .language-console, .language-text";
            for (const code of document.querySelectorAll("article .highlight pre > code")) {
              if (code.getClientRects().length === 0) continue;
              const cut = cutOff(code);
              if (!cut) continue;
              const longest = code.textContent.split("\\n")
                .reduce((a, b) => (b.length > a.length ? b : a), "").trim().slice(0, 50);
              // a block whose lines are columns scrolls instead (hooks/columns.py)
              const wrapping = code.closest(wraps) && !code.closest(".columns");
              if (wrapping) found.push(`${cut.hidden} px cut off: ${longest}`);
              else if (!cut.hint) found.push(`${cut.hidden} px, no hint: ${longest}`);
            }
            return found.slice(0, 5);
          }"""
        )

    assert not (failed := each_page(pages, check)), failed


def test_the_gallerys_error_messages_come_first_and_clear_of_the_copy_button(seen):
    """gloo's messages start with a build path, `[/__w/pytorch/...:78] Timed out ...`: on a phone
    the message began off the screen, and the copy button sat on the first line's text."""
    page = seen("failures/", "phone").page
    reveal_everything(page)
    mount_code_blocks(page)  # each block's copy button comes when it is mounted
    found = page.evaluate(
        """() => {
        const found = [];
        let messages = 0;
        for (const code of document.querySelectorAll("article .highlight pre > code")) {
          if (code.getClientRects().length === 0) continue;
          const box = code.getBoundingClientRect();
          // each message's first word, found in the text as the run printed it
          const texts = [];
          const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
          for (let n = walker.nextNode(); n; n = walker.nextNode()) texts.push(n);
          const whole = texts.map((n) => n.data).join("");
          for (const match of whole.matchAll(/Error: \\[\\/[^\\]\\s]+:\\d+\\] ?(\\S+)/g)) {
            messages += 1;
            let at = match.index + match[0].length - match[1].length;
            let node = texts[0];
            for (node of texts) {
              if (at < node.data.length) break;
              at -= node.data.length;
            }
            const range = document.createRange();
            range.setStart(node, at);
            range.setEnd(node, Math.min(node.data.length, at + match[1].length));
            const word = range.getBoundingClientRect();
            if (word.left < box.left - 1 || word.right > box.right + 1) {
              found.push(`message off screen (${Math.round(word.left)} px): ${match[1]}`);
            }
          }
          const block = code.closest(".highlight");
          const button = block.querySelector(".md-clipboard, .md-code__button");
          if (!button || button.getClientRects().length === 0) continue;
          const b = button.getBoundingClientRect();
          // the words, not the blanks: a space where a line wraps hangs past the padding,
          // and shows nothing under the button
          const under = texts.some((node) => [...node.data.matchAll(/\\S+/g)].some((word) => {
            const range = document.createRange();
            range.setStart(node, word.index);
            range.setEnd(node, word.index + word[0].length);
            return [...range.getClientRects()].some((box) => box.width > 0
              && box.right > b.left && box.left < b.right
              && box.bottom > b.top && box.top < b.bottom);
          }));
          if (under) found.push(`copy button over text: ${code.textContent.slice(0, 40)}`);
        }
        return {found: found.slice(0, 8), messages};
      }"""
    )
    assert found["messages"] >= 5, f"too few gloo messages found: {found}"
    assert not found["found"], found["found"]


# ---------------------------------------------------------------------------------------------
# Columns (issue 31): lines that are columns stay whole, no table hides a column on a laptop,
# no command breaks inside a flag. hooks/columns.py's `is_columns` is the one home of which
# blocks are table-like; each check is also shown failing on a page broken on purpose.
# ---------------------------------------------------------------------------------------------
CODE_BLOCKS = "article .highlight pre > code"
# For each block `indices` names (the table-like ones, in document order): the text lines that
# the browser drew on more than one line (a line's pieces, clustered by their tops), and whether
# a block that scrolls shows the note extra.css puts under it (and one that does not, shows none).
TABLE_LIKE_LINES = """([selector, indices]) => {
  const codes = [...document.querySelectorAll(selector)];
  const found = [];
  for (const index of indices) {
    const code = codes[index];
    if (code.getClientRects().length === 0) continue;
    const half = parseFloat(getComputedStyle(code).lineHeight) / 2;
    const tops = [];  // per text line, the tops of the boxes its text was drawn in
    let line = 0;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      let at = 0;
      node.data.split("\\n").forEach((piece, k) => {
        if (k > 0) line += 1;
        if (piece.trim()) {
          const range = document.createRange();
          range.setStart(node, at);
          range.setEnd(node, at + piece.length);
          for (const box of range.getClientRects()) {
            if (box.width > 0) (tops[line] ||= []).push(box.top);
          }
        }
        at += piece.length + 1;
      });
    }
    const texts = code.textContent.split("\\n");
    const wrapped = [];
    tops.forEach((lineTops, number) => {
      const sorted = lineTops.sort((a, b) => a - b);
      const drawn = sorted.filter((top, k) => k === 0 || top - sorted[k - 1] > half).length;
      if (drawn > 1) wrapped.push(`${drawn} lines: ${texts[number].trim().slice(0, 40)}`);
    });
    const head = texts[0].trim().slice(0, 40);
    if (wrapped.length) found.push(`${wrapped.length} of ${texts.length} lines wrapped in `
      + `"${head}": ${wrapped[0]}`);
    const scrolls = code.scrollWidth > code.clientWidth + 1;
    const note = parseFloat(getComputedStyle(code.closest(".highlight"), "::after").height) || 0;
    if (scrolls && note < 5) found.push(`scrolls with no note that it does: "${head}"`);
    if (!scrolls && note > 0) found.push(`says it scrolls, and does not: "${head}"`);
  }
  return found;
}"""

# A table wider than the box that shows it: the table, or a box around it in the article,
# scrolls sideways, or the table reaches past the article's edge.
WIDE_TABLES = """() => {
  const found = [];
  for (const table of document.querySelectorAll("article table")) {
    if (table.getClientRects().length === 0) continue;
    const head = (table.querySelector("th, td")?.innerText || "").trim().slice(0, 30);
    const article = table.closest("article");
    for (let box = table; box !== article; box = box.parentElement) {
      if (box.scrollWidth > box.clientWidth + 1) {
        found.push(`${box.scrollWidth} px in ${box.clientWidth} px: a table (${head}...)`);
        break;
      }
    }
    const right = table.getBoundingClientRect().right;
    const edge = article.getBoundingClientRect().right;
    if (right > edge + 1) found.push(`reaches ${Math.round(right - edge)} px past the article`);
  }
  return found;
}"""

# A word of a command (a whitespace-separated argument: a flag, a path, a name=value) or of
# code in a table cell, drawn on two lines, though it is narrower than the box it is in.
BROKEN_ARGUMENTS = """() => {
  const found = [];
  const where = "article :is(.language-bash, .language-console) pre > code, article td code";
  for (const code of document.querySelectorAll(where)) {
    if (code.getClientRects().length === 0) continue;
    const style = getComputedStyle(code);
    const half = parseFloat(style.lineHeight) / 2;
    const room = (code.closest("pre") ? code : code.closest("td")).clientWidth
      - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const nodes = [];
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) nodes.push(node);
    const whole = nodes.map((node) => node.data).join("");
    const place = (offset) => {  // (text node, offset in it) of an offset in `whole`
      for (const node of nodes) {
        if (offset <= node.data.length) return [node, offset];
        offset -= node.data.length;
      }
      return [nodes.at(-1), nodes.at(-1).data.length];
    };
    for (const word of whole.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(...place(word.index));
      range.setEnd(...place(word.index + word[0].length));
      const boxes = [...range.getClientRects()].filter((box) => box.width > 0);
      const tops = boxes.map((box) => box.top).sort((a, b) => a - b);
      const width = boxes.reduce((sum, box) => sum + box.width, 0);
      if (width > room) continue;  // no line could hold it
      if (tops.some((top, k) => k > 0 && top - tops[k - 1] > half)) found.push(word[0]);
    }
  }
  return found.slice(0, 8);
}"""


def table_like_problems(page):
    """The table-like blocks of `page` (those hooks/columns.py keeps whole: its rule, one home),
    by index, and what TABLE_LIKE_LINES finds wrong with them."""
    blocks = page.evaluate(
        """(selector) => [...document.querySelectorAll(selector)]
          .map((code) => [[...code.closest(".highlight").classList], code.textContent])""",
        CODE_BLOCKS,
    )
    table_like = [
        i for i, (classes, text) in enumerate(blocks) if columns.kept_whole(classes, text)
    ]
    return table_like, page.evaluate(TABLE_LIKE_LINES, [CODE_BLOCKS, table_like])


def test_table_like_blocks_keep_their_lines_on_a_phone(seen, pages):
    """33 blocks whose lines are columns wrapped at 390 px (chapter 7's scaling table, squeue,
    the job scripts' aligned comments): each text line must be one drawn line, and a block
    that scrolls must say so under it."""
    counted = {}

    def check(path):
        page = seen(path, "phone").page
        reveal_everything(page)
        table_like, found = table_like_problems(page)
        counted[path] = len(table_like)
        return found

    assert not (failed := each_page(pages, check)), failed
    assert sum(counted.values()) >= 20, f"too few table-like blocks were found: {counted}"


# A table that scrolls sideways in its box (or whose box scrolls) with no note under it.
SILENT_SCROLLING_TABLES = """() => [...document.querySelectorAll("article table")]
  .filter((table) => table.getClientRects().length > 0)
  .filter((table) => [table, table.closest(".md-typeset__scrollwrap")]
    .some((box) => box && box.scrollWidth > box.clientWidth + 1))
  .filter((table) => {
    const note = getComputedStyle(table.parentElement, "::after");
    return !(note.content.includes("scroll sideways") && parseFloat(note.height) > 0);
  })
  .map((table) => `scrolls with no note: ${table.querySelector("th, td").textContent.trim()}`)"""


def test_a_table_that_scrolls_on_a_phone_says_so_under_it(seen, pages):
    """Chapter 2's collectives table hid two of its four columns at 390 px, with a faint
    shadow at its edge as the only sign."""

    def check(path):
        page = seen(path, "phone").page
        reveal_everything(page)
        return page.evaluate(SILENT_SCROLLING_TABLES)

    assert not (failed := each_page(pages, check)), failed


def test_no_table_is_wider_than_its_box_at_1400_px(seen, pages):
    """Chapter 6's failure table ran 1,193 px wide in a 900 px box, its Fix column hidden."""

    def check(path):
        page = seen(path).page
        reveal_everything(page)
        return page.evaluate(WIDE_TABLES)

    assert not (failed := each_page(pages, check)), failed


def test_no_command_breaks_inside_an_argument_on_a_phone(seen, pages):
    """`--nnodes=2` was drawn as `--` over `nnodes=2` at 390 px, `--ckpt-dir` as `--ckpt-` over
    `dir`: a reader copies what they see."""

    def check(path):
        page = seen(path, "phone").page
        reveal_everything(page)
        return page.evaluate(BROKEN_ARGUMENTS)

    assert not (failed := each_page(pages, check)), failed


# Pages broken on purpose, each check's own fault, in the browser at 390 px: a table of ranks
# wrapped at a narrow width, the same table scrolling with no note, a table wider than its box
# (which scrolls with no note either), a torchrun line wrapped where the browser likes (after a
# hyphen).
RANKS = "\n".join(
    ["rank  node   GROUP_RANK  LOCAL_RANK  WORLD_SIZE"]
    + [f"   {r}  node{r // 2}           {r // 2}           {r % 2}           4" for r in range(4)]
)
BROKEN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
  article {{ width: 300px; font: 16px/1.4 monospace; }}
  pre > code {{ display: block; white-space: pre-wrap; line-height: 1.4; }}
  .scrolls pre > code {{ white-space: pre; overflow-x: auto; }}
  td {{ white-space: nowrap; }}
  .md-typeset__scrollwrap {{ overflow-x: auto; }}
</style></head><body><article>
<div class="language-text highlight"><pre><code>{ranks}</code></pre></div>
<div class="language-text highlight scrolls"><pre><code>{ranks}</code></pre></div>
<div class="md-typeset__scrollwrap"><table><tr><td>{ranks}</td></tr></table></div>
<div class="language-bash highlight"><pre><code>{command}</code></pre></div>
</article></body></html>"""
COMMAND = "torchrun --nnodes=2 --nproc_per_node=2 --rdzv_endpoint=node0:29400 train.py"


def test_each_columns_check_fails_on_a_page_broken_on_purpose(browser):
    context = browser.new_context(**PHONE)
    try:
        page = context.new_page()
        page.set_content(BROKEN_PAGE.format(ranks=RANKS, command=COMMAND))
        table_like, found = table_like_problems(page)
        assert table_like == [0, 1], "the table of ranks is not table-like to hooks/columns.py"
        assert any("lines wrapped" in problem for problem in found), found
        assert any("scrolls with no note" in problem for problem in found), found
        assert page.evaluate(WIDE_TABLES), "a table wider than its box passed"
        assert page.evaluate(SILENT_SCROLLING_TABLES), "a table scrolling with no note passed"
        assert set(page.evaluate(BROKEN_ARGUMENTS)) & set(COMMAND.split()), (
            "a command wrapped inside its arguments passed"
        )
    finally:
        context.close()


# ---------------------------------------------------------------------------------------------
# Issue 31, item 4 (light): as light as plain Material. Math is MathML alone, laid out by the
# browser, but where MathML renders worse (hooks/katex_math.py); punctuation and operators in
# code are drawn as plain code, so hooks/lean_code.py drops their spans.
# ---------------------------------------------------------------------------------------------
FORMULAS = """() => [...document.querySelectorAll("article .arithmatex")].map((formula) => {
  const math = formula.querySelector(".katex-mathml math") || formula.querySelector("math");
  const fractions = [...formula.querySelectorAll(".katex > math mfrac")].map((frac) => {
    const [over, under] = [...frac.children].map((part) => part.getBoundingClientRect());
    return over.bottom <= under.top + 1 && over.height > 0 && under.height > 0;
  });
  const box = math.getBoundingClientRect();
  return {
    tex: formula.querySelector("annotation").textContent,
    display: formula.tagName === "DIV",
    html: formula.querySelector(".katex-html") !== null,
    layout: getComputedStyle(math).display,
    shown: formula.getClientRects().length === 0 || (box.width > 0 && box.height > 0),
    fractions,
  };
})"""


def test_math_is_mathml_laid_out_by_the_browser_except_where_it_renders_worse(seen, site_build):
    import katex_math  # hooks/ is on the path (conftest.py)

    with_math = pages_with(site_build, 'class="arithmatex"')
    counted = {"mathml": 0, "html": 0, "fractions": 0}

    def check(path):
        page = seen(path).page
        reveal_everything(page)
        found = []
        for formula in page.evaluate(FORMULAS):
            tex, display = formula["tex"], formula["display"]
            if formula["html"] != katex_math.keeps_html(tex, display):
                found.append(f"{'KaTeX HTML' if formula['html'] else 'MathML'}: {tex[:50]}")
            counted["html" if formula["html"] else "mathml"] += 1
            if formula["html"]:
                continue
            # MathML laid out as math (Chromium 109 on), not as unknown inline elements
            wanted = "block math" if display else "math"
            if formula["layout"] != wanted or not formula["shown"]:
                found.append(f"laid out as {formula['layout']!r}: {tex[:50]}")
            counted["fractions"] += len(formula["fractions"])
            if not all(formula["fractions"]):
                found.append(f"a fraction not stacked: {tex[:50]}")
        return found[:6]

    assert not (failed := each_page(with_math, check)), failed
    # chapters 2, 3 and 7 hold over a hundred formulas, and chapter 3's mean of means is HTML
    assert counted["mathml"] > 100 and counted["html"] >= 1 and counted["fractions"] > 10, counted


PALETTES = ("default", "slate")
# a punctuation mark and an operator in Pygments' spans, beside the code's own text
CODE_TOKENS = """(scheme) => {
  const still = document.createElement("style");  // Material eases a change of colour
  still.textContent = "* { transition: none !important; }";
  document.head.append(still);
  document.body.setAttribute("data-md-color-scheme", scheme);
  const code = document.querySelector("article .language-python.highlight pre > code");
  const probes = ["p", "o"].map((token) => {
    const span = document.createElement("span");
    span.className = token;
    span.textContent = token === "p" ? "(" : "=";
    code.append(span);
    return span;
  });
  const colours = [code, ...probes].map((el) => getComputedStyle(el).color);
  [...probes, still].forEach((el) => el.remove());
  return colours;
}"""


def test_code_punctuation_and_operators_are_drawn_as_plain_code_in_both_palettes(visit):
    """What makes it right for hooks/lean_code.py to drop their spans: a `p` or `o` span would
    change nothing a reader sees, in the light palette or the dark."""
    page = visit("chapters/03-ddp/").page
    for scheme in PALETTES:
        code, punctuation, operator = page.evaluate(CODE_TOKENS, scheme)
        assert punctuation == code and operator == code, (scheme, code, punctuation, operator)


# ---------------------------------------------------------------------------------------------
# Small layout defects on a phone: code in a heading, punctuation after math, a notebook's cells,
# the copy button over code. Each check fails on the site as it was before its fix.
# ---------------------------------------------------------------------------------------------
# Inline code in a heading drawn on two lines, or past the article's edge.
HEADING_CODE = """() => [...document.querySelectorAll("article :is(h1, h2, h3, h4, h5, h6) code")]
  .filter((code) => code.getClientRects().length > 0)
  .flatMap((code) => {
    const boxes = [...code.getClientRects()].filter((box) => box.width > 0);
    const edge = code.closest("article").getBoundingClientRect().right;
    const problems = [];
    if (new Set(boxes.map((box) => Math.round(box.top))).size > 1) problems.push("2 lines");
    if (boxes.some((box) => box.right > edge + 1)) problems.push("past the article's edge");
    return problems.map((problem) => `${problem}: ${code.textContent}`);
  })"""


def test_inline_code_in_a_heading_is_one_line_on_a_phone(seen, pages):
    """The failure gallery's "A collective inside `if rank == 0:`" broke as `if rank ==` over
    `0:` at 390 px."""

    def check(path):
        return seen(path, "phone").page.evaluate(HEADING_CODE)

    assert not (failed := each_page(pages, check)), failed


# An inline formula followed by punctuation that the browser drew at the start of the next
# line: left of the formula's right edge, where on the same line it would sit at that edge.
PUNCTUATION_AFTER_MATH = """() => {
  const found = [];
  for (const formula of document.querySelectorAll("article span.arithmatex")) {
    if (formula.getClientRects().length === 0) continue;
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    walker.currentNode = formula.lastChild;
    let next = walker.nextNode();
    while (next && formula.contains(next)) next = walker.nextNode();
    if (!next || !/^[.,;:!?)]/.test(next.data)) continue;
    const range = document.createRange();
    range.setStart(next, 0);
    range.setEnd(next, 1);
    const mark = range.getBoundingClientRect();
    const math = [...formula.getClientRects()].at(-1);
    if (mark.left < math.right - 1) {
      found.push(`"${next.data[0]}" starts a line after ${formula.textContent.slice(-30)}`);
    }
  }
  return found;
}"""


def test_no_line_starts_with_the_punctuation_after_a_formula(seen, site_build):
    """A line started with the "." or "," after a formula, the formula on the line above: in
    chapter 4 at 390 px, in chapter 3 at 360, 375 and 412 (hooks/katex_math.py's math-tail)."""
    with_math = pages_with(site_build, 'class="arithmatex"')

    def check(path):
        page = seen(path, "phone").page
        reveal_everything(page)
        return page.evaluate(PUNCTUATION_AFTER_MATH)

    assert not (failed := each_page(with_math, check)), failed


NOTEBOOK_CODE_INSET_PX = 24  # the cell's border and the code's padding, no prompt column


def test_a_notebooks_code_starts_at_its_cells_left_edge_on_a_phone(seen, site_build):
    """The `In [1]:` prompt column took 80 of 390 px, beside every cell's code."""
    notebook = one_page_with(site_build, "jp-CodeCell")
    insets = seen(notebook, "phone").page.evaluate(
        """() => [...document.querySelectorAll("article .jp-CodeCell")].map((cell) => {
          const code = cell.querySelector(".jp-InputArea-editor pre");
          return code.getBoundingClientRect().left - cell.getBoundingClientRect().left;
        })"""
    )
    assert insets and max(insets) <= NOTEBOOK_CODE_INSET_PX, insets


# The words of code under the copy button of their block: Material's (a `.highlight` block) or
# mkdocs-jupyter's (a notebook cell), as the page is shown and with each block scrolled to its
# end. A blank under the button shows nothing and is not counted.
UNDER_THE_COPY_BUTTON = """() => {
  const found = [];
  const where = "article .highlight pre > code, article .jp-InputArea-editor pre";
  for (const code of document.querySelectorAll(where)) {
    if (code.getClientRects().length === 0) continue;
    const block = code.closest(".highlight, .jp-InputArea-editor");
    const button = block.querySelector(".md-clipboard, .md-code__button, clipboard-copy");
    if (!button || button.getClientRects().length === 0) continue;
    const b = button.getBoundingClientRect();
    const covers = (box) => box.width > 0 && box.right > b.left && box.left < b.right
      && box.bottom > b.top && box.top < b.bottom;
    const scroller = code.closest(".highlight-ipynb") || code;
    for (const end of [0, scroller.scrollWidth]) {
      scroller.scrollLeft = end;
      const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const whole = document.createRange();
        whole.selectNodeContents(node);
        if (![...whole.getClientRects()].some(covers)) continue;
        for (const word of node.data.matchAll(/\\S+/g)) {
          const range = document.createRange();
          range.setStart(node, word.index);
          range.setEnd(node, word.index + word[0].length);
          if ([...range.getClientRects()].some(covers)) {
            found.push(`"${word[0]}" in ${code.textContent.trim().slice(0, 30)}`);
          }
        }
      }
    }
    scroller.scrollLeft = 0;
  }
  return [...new Set(found)].slice(0, 6);
}"""


@contextlib.contextmanager
def narrowed_to_a_laptop(page):
    """A desktop page in its window narrowed to a laptop's, as a reader narrows one, then
    widened back: loading every page again at that width took ten times as long."""
    page.set_viewport_size(LAPTOP["viewport"])
    page.evaluate(NEXT_FRAME)  # the resize event comes first: a11y.js measures again
    try:
        yield
    finally:
        page.set_viewport_size(DESKTOP["viewport"])
        page.evaluate(NEXT_FRAME)


@pytest.mark.parametrize("screen", ["desktop", "laptop", "phone"])
def test_no_copy_button_covers_code(seen, pages, screen):
    """The copy button hid the end of a notebook cell's first line at 390 px, of an output
    line of chapter 1 at 1400, and of the first line of the Slurm page's node-env.sh at
    1024 (and of the cheat sheet's job script at 1000)."""

    def check(path):
        page = seen(path, "phone" if screen == "phone" else "desktop").page
        with narrowed_to_a_laptop(page) if screen == "laptop" else contextlib.nullcontext():
            reveal_everything(page)
            mount_code_blocks(page)  # each block's copy button comes when it is mounted
            return page.evaluate(UNDER_THE_COPY_BUTTON)

    assert not (failed := each_page(pages, check)), failed


# A diff's lines on a phone: each text line starts with its marker (`+`, `-` or a space) at the
# code's left edge, a line the browser wrapped goes on right of that column, and nothing is
# hidden off the side.
DIFF_LINES = """() => {
  const found = [];
  for (const code of document.querySelectorAll("article .language-diff pre > code")) {
    if (code.getClientRects().length === 0) continue;
    const style = getComputedStyle(code);
    const edge = code.getBoundingClientRect().left + parseFloat(style.paddingLeft);
    const near = parseFloat(style.fontSize) / 4;
    if (code.scrollWidth > code.clientWidth + 1) {
      found.push(`${code.scrollWidth - code.clientWidth} px off the side`);
    }
    let previous = "\\n";
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let at = 0; at < node.data.length; previous = node.data[at], at++) {
        if (node.data[at] === "\\n") continue;
        const range = document.createRange();
        range.setStart(node, at);
        range.setEnd(node, at + 1);
        const box = range.getClientRects()[0];
        if (!box) continue;
        const atEdge = Math.abs(box.left - edge) < near;
        const line = () => node.data.trim().slice(0, 40);
        if (previous === "\\n" && !atEdge) found.push(`a marker off its column: ${line()}`);
        if (previous !== "\\n" && atEdge) found.push(`wrapped under the marker: ${line()}`);
      }
    }
  }
  return [...new Set(found)].slice(0, 6);
}"""


def test_a_diff_is_read_on_a_phone_without_scrolling_its_markers_in_a_column(seen, site_build):
    """Half of each line of chapter 1's diff was off the side at 390 px. A diff of code wraps:
    each wrapped line hangs right of the `+`/`-` column, which stays whole."""
    with_diffs = pages_with(site_build, "language-diff")
    assert "chapters/01-first-job/" in with_diffs, with_diffs

    def check(path):
        page = seen(path, "phone").page
        reveal_everything(page)
        return page.evaluate(DIFF_LINES)

    assert not (failed := each_page(with_diffs, check)), failed
