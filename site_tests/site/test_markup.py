"""The built site's markup, read by the W3C Nu HTML checker (vnu) as a validator reads it.

vnu comes from npm's vnu-jar (pinned in site_tests/tools/package.json, installed by .ci/run beside
Lighthouse and axe-core) and runs on Java. It reads every HTML file the build wrote in a single
run: one JVM start, about ten seconds on two busy cores. Every error it reports must be on
THEIRS, the short list of errors made by templates this project uses but does not write, each
matched by its message, the markup vnu quotes around it, and the pages it may appear on:

- Material 9.8.2's base.html and partials/nav-item.html, on every page. A plain Material site
  (one page, `theme: material`, and `navigation.sections` with one section for the second)
  shows the same errors.
- mkdocs-jupyter 0.26.3's notebook template, on the notebook page only. A plain Material site
  with `plugins: [mkdocs-jupyter]` and a one-cell notebook shows the same, and more of them:
  hooks/notebooks.py already drops the JupyterLab rules that no element of the page can match.

Everything else is ours (hooks/, overrides/, the pages) and fails the test: chapter 2's
`\\bmod`, for one, which KaTeX writes as MathML that HTML does not allow (an `mrow` inside an
`mo`); the page says `\\mathrm{mod}` instead. An entry of THEIRS that matches nothing on the
site fails too, so the list cannot outlive the template it excuses.

Beside the site, vnu reads copies of a page broken on purpose (BROKEN), in the same run: each
must fail the check, with the error it was broken with among what vnu holds against it.
"""

import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from site_tests.conftest import ROOT, npm_tool, pace

VNU_RUN_S = 120  # one run over the whole site, at pace's reference machine (it takes ~10 s)


@dataclasses.dataclass(frozen=True)
class Theirs:
    """An error a template we use makes: vnu's message (a regex, matched whole), a regex found
    in vnu's extract (the markup around the error), the pages it may appear on (a regex on the
    page's path), and why it is not ours."""

    message: str
    markup: str
    pages: str
    why: str

    def covers(self, error):
        return bool(
            re.fullmatch(self.message, error.message)
            and re.search(self.markup, error.extract)
            and re.fullmatch(self.pages, error.page)
        )


EVERY_PAGE = r".*"
NOTEBOOK = r"notebooks/[^/]+/"
THEIRS = [
    Theirs(
        r"Attribute “autocomplete” is only allowed when the input type is .*",
        r'<input class="md-toggle" data-md-toggle="(drawer|search)" type="checkbox"',
        EVERY_PAGE,
        "Material's base.html: its drawer and search toggles are checkboxes with"
        ' autocomplete="off", which keeps Firefox from restoring them checked on reload',
    ),
    Theirs(
        r"Bad value “” for attribute “tabindex” on element “label”: .*",
        r'<label class="md-nav__link ?[\w-]*" for="__nav_\d+" id="__nav_\d+_label" tabindex="">',
        EVERY_PAGE,
        "Material's partials/nav-item.html: a section's label under navigation.sections gets"
        ' tabindex="{{ tabindex }}", which is empty for a section (in both of its branches:'
        " the one for a section that holds the page shown writes its class list with a space)",
    ),
    Theirs(
        r"A “style” element in “body” must be the first child of its parent\.",
        r"<style( type=\"text/css\")?>",
        NOTEBOOK,
        "mkdocs-jupyter's notebook.html.j2 and nb2html write the notebook's stylesheets"
        " (Pygments, JupyterLab, Mermaid) as <style> elements after its scripts, in the"
        " page's body",
    ),
    Theirs(
        r"Bad value “” for attribute “src” on element “script”: Must be non-empty\.",
        r'thjax -->\s*<script src="">',  # "<!-- Load mathjax -->", cut short by vnu
        NOTEBOOK,
        "mkdocs-jupyter's custom_mathjax_url is empty unless set, and the notebook template"
        " loads MathJax from it all the same (setting it would fetch MathJax from a CDN, and"
        " the site works offline)",
    ),
    Theirs(
        r"The “aria-label” attribute must not be specified on any “clipboard-copy” element .*",
        r'<clipboard-copy ,="" aria-label="Copy to Clipboard" for="cell-\d+">',
        NOTEBOOK,
        "mkdocs-jupyter's copy button per code cell: its script gives the element"
        ' role="button" when it mounts, but vnu reads the markup before any script runs',
    ),
    Theirs(
        r"CSS: (Unknown pseudo-element or pseudo-class “:(horizontal|vertical)”"
        r"|“box-(orient|align|pack)”: Property “box-(orient|align|pack)” doesn't exist\."
        r"|“cursor”: “normal” is not a “cursor” value\.)",
        r".",
        NOTEBOOK,
        "JupyterLab's stylesheet, which mkdocs-jupyter inlines: old flexbox properties,"
        " WebKit's scrollbar pseudo-classes and cursor: normal, which browsers ignore",
    ),
]


@dataclasses.dataclass(frozen=True)
class Error:
    page: str  # the page's path from the site's root ("" is home), or "broken:NAME"
    line: int
    message: str
    extract: str

    def __str__(self):
        return f"{self.page or '(home)'} line {self.line}: {self.message} [{self.extract!r}]"


# Copies of chapter 3 broken on purpose, each with the one error vnu must hold against it:
# a stray stylesheet in a block; Material's listed error on an element of our own; the
# notebook template's listed error on a page that is not the notebook; chapter 2's old MathML.
BROKEN = {
    "stray-style": (
        '<div class="broken"><p>Broken on purpose.</p><style>p { color: red; }</style></div>',
        r"A “style” element in “body” must be the first child of its parent\.",
    ),
    "our-checkbox": (
        '<input class="broken" type="checkbox" autocomplete="off">',
        r"Attribute “autocomplete” is only allowed when the input type is .*",
    ),
    "script-without-src": (
        '<!-- Load mathjax -->\n<script src=""> </script>',
        r"Bad value “” for attribute “src” on element “script”: Must be non-empty\.",
    ),
    "mathml-bmod": (
        '<math><mi>r</mi><mo lspace="0.22em" rspace="0.22em"><mrow><mi mathvariant="normal">'
        "m</mi></mrow></mo><mi>p</mi></math>",
        r"Element “mrow” not allowed as child of element “mo” in this context\..*",
    ),
}
BROKEN_PAGE = "chapters/03-ddp/index.html"


def vnu_jar():
    """The pinned vnu-jar's jar (conftest.npm_tool), and Java to run it, or skip saying why."""
    if shutil.which("java") is None:
        pytest.skip("vnu needs Java (on Debian: apt-get install default-jre-headless)")
    return npm_tool("vnu-jar") / "build" / "dist" / "vnu.jar"


def run_vnu(jar, files):
    """vnu's errors in `files` (HTML), read in one run: [(file, line, message, extract)]."""
    options = ["--format", "json", "--errors-only", "--stdout"]  # stderr: Java's own notes
    command = ["java", "-jar", str(jar), *options, *map(str, files)]
    limit = pace.limit(VNU_RUN_S)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=limit)
    # vnu exits 1 when it found an error
    assert proc.returncode in (0, 1), f"vnu failed ({proc.returncode}): {proc.stderr[-2000:]}"
    found = []
    for message in json.loads(proc.stdout)["messages"]:
        # "error" (with subType "fatal" where vnu stopped reading) or "non-document-error"
        assert message["type"] != "non-document-error", message
        file = pathlib.Path(re.sub(r"^file:", "", message["url"]))
        found.append((file, message.get("lastLine", 0), message["message"], message["extract"]))
    return found


@pytest.fixture(scope="module")
def site_build(request):
    """(site, lab cache): this session's build, or the site already built in $SITE_DIR, as in
    test_browser.py."""
    if folder := os.environ.get("SITE_DIR"):
        cache = os.environ.get("LAB_CACHE_DIR", ROOT / ".cache" / "labs")
        return pathlib.Path(folder).resolve(), pathlib.Path(cache)
    return request.getfixturevalue("built_site")


@pytest.fixture(scope="module")
def vnu():
    """The jar; asked for before the site, so that a missing vnu skips before a cold build."""
    return vnu_jar()


@pytest.fixture(scope="module")
def vnu_errors(vnu, site_build, tmp_path_factory):
    """Every error vnu finds in the site's HTML and in the broken copies, by page."""
    site = site_build[0]
    broken = tmp_path_factory.mktemp("broken-markup")
    page = (site / BROKEN_PAGE).read_text(encoding="utf-8")
    assert page.count("</article>") == 1
    copies = {}
    for name, (breakage, _) in BROKEN.items():
        copies[broken / f"{name}.html"] = f"broken:{name}"
        (broken / f"{name}.html").write_text(page.replace("</article>", breakage + "</article>"))
    files = sorted(site.rglob("*.html"))
    assert len(files) >= 5, files

    def page_of(file):
        if file in copies:
            return copies[file]
        return file.relative_to(site).as_posix().removesuffix("index.html")

    found = run_vnu(vnu, [*files, *copies])
    return [Error(page_of(file), line, message, extract) for file, line, message, extract in found]


def ours(errors):
    return [error for error in errors if not any(entry.covers(error) for entry in THEIRS)]


def test_the_nu_checker_finds_no_error_in_our_markup(vnu_errors):
    site = [error for error in vnu_errors if not error.page.startswith("broken:")]
    assert not (found := ours(site)), "\n".join(map(str, found))


def test_every_listed_error_of_a_template_still_happens(vnu_errors):
    """An entry of THEIRS that nothing matches is gone from the template: drop it."""
    site = [error for error in vnu_errors if not error.page.startswith("broken:")]
    stale = [entry.why for entry in THEIRS if not any(entry.covers(e) for e in site)]
    assert not stale, stale


@pytest.mark.teeth
@pytest.mark.parametrize("name", BROKEN)
def test_a_page_broken_on_purpose_fails_the_check(vnu_errors, name):
    _, expected = BROKEN[name]
    found = ours(e for e in vnu_errors if e.page == f"broken:{name}")
    assert found, f"vnu found nothing of ours on the copy broken with {name}"
    assert any(re.fullmatch(expected, e.message) for e in found), "\n".join(map(str, found))
