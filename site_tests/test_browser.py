"""The built site in a real browser: Chromium, driven by Playwright, fully offline.

The site from the `built_site` fixture is served by a small http.server on 127.0.0.1 (a free
port, in a thread), and one Chromium is launched for the whole module. Every page visit records
every request its page and workers make, and a request for any other host fails the test: the
site must work with no network at all. Console errors and uncaught exceptions fail it too.

Screenshots of the module page and the gloo lab page go to site_tests/artifacts/ (ignored by
git) so that a person can look at what the test saw.
"""

import ast
import contextlib
import functools
import http.server
import io
import json
import math
import pathlib
import re
import shutil
import threading
from urllib.parse import urlsplit

import pytest

from site_tests.conftest import ROOT

CHROMIUM = pathlib.Path("/usr/bin/chromium")
if shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        f"no Chromium at {CHROMIUM} (on Debian/Ubuntu: apt-get install chromium)",
        allow_module_level=True,
    )
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

ARTIFACTS = pathlib.Path(__file__).parent / "artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PAGES = ["", "26-ddp/", "labs/26-ddp-gloo/", "labs/26-ddp-nccl/", "failures/"]
MODULE, GLOO = "26-ddp/", "labs/26-ddp-gloo/"
PAGE_BUDGET_BYTES = 1.5e6


# ---------------------------------------------------------------------------------------------
# A local server and one browser for the module
# ---------------------------------------------------------------------------------------------
class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002  (the base class's name)
        pass


@pytest.fixture(scope="module")
def served(built_site):
    site, _ = built_site
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Visit:
    """One page in a fresh browser context, with everything it asked for and complained of."""

    def __init__(self, browser, base, path, **context_options):
        self.base = base
        self.requests, self.errors = [], []
        self.responses = []
        self.context = browser.new_context(service_workers="block", **context_options)
        # Recorded, not intercepted: routing would also catch the search worker's requests,
        # and Material's search stops working under it. The machine has no network anyway.
        self.context.on("request", lambda request: self.requests.append(request.url))
        self.context.on("response", lambda response: self.responses.append(response))
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)  # fail in seconds, not half a minute, per step
        self.page.on("console", self.console)
        self.page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        self.page.goto(base + path, wait_until="load")
        self.page.wait_for_load_state("networkidle")

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
        opened.append(Visit(browser, served, path, **context_options))
        return opened[-1]

    yield open_page
    for page in opened:
        page.close()


@pytest.fixture(scope="module")
def seen(browser, served):
    """Open each page once for the whole module, for tests that only look (a page costs ~2 s)."""
    opened = {}

    def open_once(path):
        if path not in opened:
            opened[path] = Visit(browser, served, path)
        return opened[path]

    yield open_once
    for page in opened.values():
        page.close()


def body_text(page):
    return page.locator("article").inner_text()


def prose_text(page):
    """The article's text without code blocks and inline code, where backslashes are legal."""
    return page.evaluate(
        """() => {
        const article = document.querySelector("article").cloneNode(true);
        article.querySelectorAll("pre, code, .katex").forEach((el) => el.remove());
        return article.textContent;
      }"""
    )


def open_search(page):
    """Material shows the search box in the header on wide screens, behind a button on narrow."""
    button = page.locator("label.md-header__button[for=__search]")
    if button.is_visible():
        button.click()
    page.locator("input.md-search__input").click()


# ---------------------------------------------------------------------------------------------
# Every page
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", PAGES)
def test_page_loads_offline_without_errors(seen, path):
    visited = seen(path)
    assert not visited.errors, "\n".join(visited.errors)
    foreign = [
        url
        for url in visited.requests
        if not url.startswith(("data:", "blob:")) and urlsplit(url).hostname != "127.0.0.1"
    ]
    assert not foreign, f"requests that left 127.0.0.1: {foreign}"
    assert len(visited.requests) > 3  # the page, its CSS and scripts were really fetched


@pytest.mark.parametrize("path", PAGES)
def test_every_image_has_a_text_alternative(seen, path):
    page = seen(path).page
    missing = page.evaluate(
        """() => {
        const name = (el) => {
          if (el.tagName.toLowerCase() === "img") return el.getAttribute("alt") || "";
          const ids = (el.getAttribute("aria-labelledby") || "").split(/\\s+/).filter(Boolean);
          const labelled = ids.map((id) => document.getElementById(id)?.textContent || "");
          return (el.getAttribute("aria-label") || "") + labelled.join(" ");
        };
        return [...document.querySelectorAll("article img, article [role=img]")]
          .filter((el) => name(el).trim().length < 10)
          .map((el) => el.outerHTML.slice(0, 120));
      }"""
    )
    assert not missing, f"images without a useful text alternative: {missing}"


@pytest.mark.parametrize("path", PAGES)
def test_headings_start_at_h1_and_skip_no_level(seen, path):
    levels = seen(path).page.evaluate(
        """() => [...document.querySelectorAll("article :is(h1, h2, h3, h4, h5, h6)")]
                   .map((h) => [Number(h.tagName[1]), h.textContent])"""
    )
    assert levels and levels[0][0] == 1, f"the first heading is not an h1: {levels[:1]}"
    skips = [
        f"h{a} {ta!r} -> h{b} {tb!r}"
        for (a, ta), (b, tb) in zip(levels, levels[1:], strict=False)
        if b > a + 1
    ]
    assert not skips, f"heading levels skipped: {skips}"


# ---------------------------------------------------------------------------------------------
# The module page
# ---------------------------------------------------------------------------------------------
def test_math_is_typeset(seen):
    page = seen(MODULE).page
    assert page.locator(".katex").count() > 10
    assert page.locator(".katex-error").count() == 0
    text = prose_text(page)
    for raw in ("\\(", "\\)", "\\[", "\\]"):
        assert raw not in text, f"untypeset math delimiter {raw!r} left in the page"


def test_search_finds_no_sync(visit):
    page = visit(MODULE).page
    open_search(page)
    # typed key by key, as a reader would: Material reads the query on keyboard events
    page.locator("input.md-search__input").press_sequentially("no_sync", delay=20)
    results = page.locator(".md-search-result__item")
    results.first.wait_for(timeout=30_000)  # the worker indexes the site first
    links = [
        results.nth(i).locator("a").first.get_attribute("href") for i in range(results.count())
    ]
    assert any("26-ddp/" in link for link in links), links
    assert "no_sync" in page.locator(".md-search-result").inner_text()


def scaling_fence():
    """The module page's Python block that defines allreduce_seconds, run here for its values."""
    page = (ROOT / "docs" / "26-ddp.md").read_text(encoding="utf-8")
    fences = re.findall(r"^```python[^\n]*\n(.*?)^```", page, re.S | re.M)
    (source,) = [body for body in fences if "def allreduce_seconds(" in body]
    names = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    assert {"allreduce_seconds", "step_compute_seconds", "backward_seconds"} <= names
    namespace = {}
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its table; we want its values
        exec(compile(source, "26-ddp.md: scaling model", "exec"), namespace)
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


def test_calculator_gives_the_fences_numbers(visit):
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
    page = visit(MODULE).page
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
        assert shown["allreduce"][1] == f"{allreduce * 1e3:.1f} ms"
        assert shown["hidden"][1].startswith("yes" if allreduce <= backward else "no")


def test_calculator_refuses_nonsense(visit):
    page = visit(MODULE).page
    shown = calculator_values(page, {"gpus": 2.5})
    assert all(value is None for value, _ in shown.values())
    assert "positive" in page.locator("[data-calculator-message]").inner_text()


def test_ring_stepper_steps_with_buttons_and_keys(visit):
    page = visit(MODULE).page
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


def test_ring_stepper_without_javascript_shows_every_step(visit):
    page = visit(MODULE, java_script_enabled=False).page
    panels = page.locator("[data-stepper] > figure")
    assert panels.count() >= 3
    assert all(panels.nth(i).is_visible() for i in range(panels.count()))
    assert not page.locator(".fig-stepper__controls").is_visible()


def test_dark_palette_toggles_and_figures_follow_it(visit):
    page = visit(MODULE).page
    scheme = "document.body.getAttribute('data-md-color-scheme')"
    figure_colour = "getComputedStyle(document.querySelector('.fig-ring')).color"
    assert page.evaluate(scheme) == "default"
    light = page.evaluate(figure_colour)
    page.locator("form[data-md-component=palette] label:visible").first.click()
    assert page.evaluate(scheme) == "slate"
    assert page.evaluate(figure_colour) != light, "the figures ignore the palette"
    page.locator("form[data-md-component=palette] label:visible").first.click()
    assert page.evaluate(scheme) == "default"


def test_module_page_with_all_its_assets_fits_the_budget(visit):
    seen = visit(MODULE)
    open_search(seen.page)  # the search index counts, too
    seen.page.wait_for_load_state("networkidle")
    sizes = {response.url: len(response.body()) for response in seen.responses}
    total = sum(sizes.values())
    heaviest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
    assert total <= PAGE_BUDGET_BYTES, f"{total / 1e6:.2f} MB; heaviest: {heaviest}"


@pytest.mark.parametrize("path", [MODULE, GLOO])
def test_no_horizontal_scroll_on_a_phone(visit, path):
    page = visit(path, viewport={"width": 390, "height": 844}, is_mobile=True).page
    widths = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    culprits = page.evaluate(
        """(width) => {
        const clips = ["auto", "scroll", "hidden", "clip"];
        const scrolls = (el) => clips.includes(getComputedStyle(el).overflowX);
        const inScroller = (el) => {
          for (let up = el.parentElement; up; up = up.parentElement) if (scrolls(up)) return true;
          return false;
        };
        return [...document.body.querySelectorAll("*")]
          .filter((el) => el.getBoundingClientRect().right > width + 1 && !inScroller(el))
          .slice(0, 5)
          .map((el) => `${el.tagName}.${el.className}: ${el.textContent.slice(0, 60)}`);
      }""",
        widths[1],
    )
    assert widths[0] <= widths[1], (
        f"page is {widths[0]} px wide in a {widths[1]} px viewport; too wide: {culprits}"
    )


# ---------------------------------------------------------------------------------------------
# The gloo lab page
# ---------------------------------------------------------------------------------------------
def lab_record(cache, name):
    (folder,) = cache.glob(f"{name}-*/")
    return json.loads((folder / "record.json").read_text())


def test_gloo_lab_page_shows_its_output_and_provenance(seen, built_site):
    _, cache = built_site
    record = lab_record(cache, "gloo")
    page = seen(GLOO).page
    text = re.sub(r"\s+", " ", body_text(page))
    for line in record["stdout"].strip().splitlines():
        assert re.sub(r"\s+", " ", line).strip() in text, f"printed line missing: {line!r}"
    for fact in (record["started_utc"], record["git_commit"], record["result"]["env"]["torch"]):
        assert fact in text, f"provenance {fact!r} missing"
    assert " ".join(record["command"]) in text


def test_screenshots_for_a_person(seen):
    ARTIFACTS.mkdir(exist_ok=True)
    for path, name in ((MODULE, "module"), (GLOO, "lab-gloo")):
        target = ARTIFACTS / f"{name}.png"
        seen(path).page.screenshot(path=str(target), full_page=True)
        assert target.stat().st_size > 10_000
