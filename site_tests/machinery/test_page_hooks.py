"""The small page hooks: math typeset at build time, code kept out of the search index, code
without its invisible spans, tables in boxes of their own, the failure gallery's index of error
messages, a tooltip per term and page, scripts only where a page uses them.

They run on a page's HTML or Markdown alone, so they are tested here on strings; the built
site's pages are checked in a browser by test_browser.py (typeset math, page weight, search).
"""

import importlib.util
import pathlib
import re
import sys
import types

import pytest
from markdown.extensions.toc import slugify
from mkdocs.exceptions import PluginError

from site_tests.conftest import ROOT


def hook(name):
    """A fresh copy of hooks/NAME.py, able to import its siblings as it does under mkdocs."""
    if str(ROOT / "hooks") not in sys.path:
        sys.path.insert(0, str(ROOT / "hooks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAGE = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="chapters/test.md"))


def typeset(content):
    return hook("katex_math").on_page_content(content, page=PAGE, config=None, files=None)


def test_inline_and_display_math_are_typeset_at_build_time():
    page = typeset(
        '<p>It sends <span class="arithmatex">\\(2(p-1)S/p\\)</span> bytes.</p>\n'
        '<div class="arithmatex">\\[t = \\alpha + \\frac{S}{\\beta}\\]</div>'
    )
    assert "\\(" not in page and "\\[" not in page, "a formula was left for the browser"
    assert page.count('class="katex"') == 2 and 'class="katex-display"' in page
    # MathML for screen readers, with the TeX it came from
    assert page.count("<math") == 2 and "\\frac{S}{\\beta}" in page
    assert page.count("data-search-exclude") == 2


def test_an_escaped_formula_is_unescaped_before_typesetting():
    page = typeset('<span class="arithmatex">\\(a &lt; b\\)</span>')
    assert "<mo>&lt;</mo>" in page


def test_a_formula_katex_cannot_parse_fails_the_build():
    with pytest.raises(PluginError, match=r"chapters/test.md: KaTeX cannot typeset .*\\frac\{"):
        typeset('<span class="arithmatex">\\(\\frac{1\\)</span>')


def test_code_blocks_are_kept_out_of_search():
    search_scope = hook("search_scope")
    page = '<p>prose</p><div class="highlight"><pre><code>x = 1</code></pre></div>'
    done = search_scope.on_page_content(page, page=PAGE, config=None, files=None)
    assert '<div class="highlight" data-search-exclude><pre>' in done
    assert "<p>prose</p>" in done

    # ... except the gallery's error messages, which a reader pastes into the search
    message = '<div class="error-message highlight"><pre><code>RuntimeError: x</code></pre></div>'
    assert search_scope.on_page_content(message, page=PAGE, config=None, files=None) == message


# ---------------------------------------------------------------------------------------------
# Tables written the way Material mounts them (hooks/tables.py)
# ---------------------------------------------------------------------------------------------
def built_tables(content):
    return hook("tables").on_page_content(content, page=PAGE, config=None, files=None)


def test_each_table_is_written_inside_materials_wrapper_and_nothing_else_changes():
    rows = "\n<thead><tr><th>p</th></tr></thead><tbody><tr><td>1</td></tr></tbody>\n"
    page = f"<h2>A</h2>\n<table>{rows}</table>\n<p>between</p>\n<table>{rows}</table>"
    done = built_tables(page)
    wrapped = (
        '<div class="md-typeset__scrollwrap"><div class="md-typeset__table">'
        f'<table class="course-table">{rows}</table></div></div>'
    )
    assert done.count(wrapped) == 2
    assert done.replace(wrapped, f"<table>{rows}</table>") == page


def test_a_table_with_a_class_of_its_own_is_left_alone():
    """Material mounts only tables without a class (line-numbered code is one with)."""
    numbered = '<table class="highlighttable"><tr><td>1</td></tr></table>'
    assert built_tables(numbered) == numbered


def test_materials_table_rules_are_aimed_at_the_built_tables_and_no_other_rule_is():
    css = (
        "@font-face{font-family:X}.md-typeset table:not([class]){font-size:.64rem}"
        ".md-typeset table:not([class]) td,.md-typeset table:not([class]) th{padding:1em}"
        ".md-typeset code{color:red}"
        "@media print{.md-typeset table:not([class]){display:table}.md-nav{display:none}}"
        "@media screen{.md-nav{display:block}}"
    )
    assert hook("tables").table_rules(css) == (
        ".md-typeset table.course-table{font-size:.64rem}"
        ".md-typeset table.course-table td,.md-typeset table.course-table th{padding:1em}"
        "@media print{.md-typeset table.course-table{display:table}}"
    )


def test_the_built_stylesheet_holds_every_table_rule_of_materials_own(tmp_path):
    (material,) = importlib.util.find_spec("material").submodule_search_locations
    (main,) = (pathlib.Path(material) / "templates" / "assets" / "stylesheets").glob("main.*.css")
    sheets = tmp_path / "assets" / "stylesheets"
    sheets.mkdir(parents=True)
    (sheets / main.name).write_text(main.read_text(encoding="utf-8"), encoding="utf-8")
    hook("tables").on_post_build({"site_dir": str(tmp_path)})
    built = (sheets / "tables.css").read_text(encoding="utf-8")
    theirs = main.read_text(encoding="utf-8").count("table:not([class])")
    assert theirs > 5 and built.count("table.course-table") == theirs
    assert "table:not([class])" not in built


def test_a_material_without_plain_table_rules_fails_the_build(tmp_path):
    sheets = tmp_path / "assets" / "stylesheets"
    sheets.mkdir(parents=True)
    (sheets / "main.0.min.css").write_text(".md-typeset table.other{color:red}", encoding="utf-8")
    with pytest.raises(PluginError, match=r"main.0.min.css has no rule for table:not\(\[class\]\)"):
        hook("tables").on_post_build({"site_dir": str(tmp_path)})


# ---------------------------------------------------------------------------------------------
# Code blocks without the spans that change nothing (hooks/lean_code.py)
# ---------------------------------------------------------------------------------------------
HIGHLIGHTED = (
    '<div class="language-python highlight"><pre><span></span><code>'
    '<span class="kn">import</span><span class="w"> </span><span class="nn">torch</span>\n'
    '<span class="n">x</span> <span class="o">=</span> <span class="n">torch</span>'
    '<span class="o">.</span><span class="n">ones</span><span class="p">(</span>'
    '<span class="mi">2</span><span class="p">)</span>\n</code></pre></div>'
)


def lean(content):
    return hook("lean_code").on_page_content(content, page=PAGE, config=None, files=None)


def text_of(markup):
    return re.sub(r"<[^>]+>", "", markup)


def test_names_spaces_punctuation_and_operators_lose_their_spans_and_nothing_else_changes():
    page = '<p>A <span class="n">span</span> in prose stays.</p>' + HIGHLIGHTED
    done = lean(page)
    assert text_of(done) == text_of(page)
    code = done.split("<div", 1)[1]
    assert not re.search(r'class="[nwop]"', code), code
    # three names, one space, two operators, two punctuation marks
    assert done.count("<span") == page.count("<span") - 8
    for kept in ("kn", "nn", "mi"):
        assert f'<span class="{kept}">' in done
    assert '<span class="n">span</span> in prose' in done


def test_a_notebook_cell_keeps_its_own_classes():
    cell = '<div class="highlight-ipynb hl-python"><pre><span class="n">x</span></pre></div>'
    assert lean(cell) == cell


def abbr(term):
    return f'<abbr title="{term}, spelled out">{term}</abbr>'


def first_use_only(content):
    return hook("abbreviations").on_page_content(content, page=PAGE, config=None, files=None)


def test_a_term_keeps_its_tooltip_at_its_first_use_only():
    page = f"<p>{abbr('DDP')} wraps the model.</p><p>{abbr('NCCL')} and {abbr('DDP')}.</p>"
    done = first_use_only(page)
    assert done == f"<p>{abbr('DDP')} wraps the model.</p><p>{abbr('NCCL')} and DDP.</p>"


def test_a_term_first_met_in_a_fold_keeps_its_tooltip_where_the_open_text_uses_it():
    fold = f"<details><summary>How we know</summary><p>{abbr('DDP')} here</p></details>"
    done = first_use_only(f"{fold}<p>Then {abbr('DDP')}.</p>")
    assert done.count("<abbr") == 1 and done.endswith(f"<p>Then {abbr('DDP')}.</p>")


def test_a_term_used_only_in_folds_keeps_its_tooltip_in_the_first():
    fold = f"<details><summary>Why</summary><p>{abbr('busbw')}</p></details>"
    done = first_use_only(f"<p>Before.</p>{fold}{fold}<p>After.</p>")
    assert done == f"<p>Before.</p>{fold}{fold.replace(abbr('busbw'), 'busbw')}<p>After.</p>"


PAGE_END = (
    '<script defer src="../assets/javascripts/bundle.min.js"></script>\n'
    '<script defer src="../assets/javascripts/stepper.js"></script>\n'
    '<script defer src="../assets/javascripts/scaling-calculator.js"></script>\n'
    '<script defer src="../assets/javascripts/a11y.js"></script>\n</body>'
)


def scripts_of(page):
    done = hook("page_scripts").on_post_page(page, page=PAGE, config=None)
    return re.findall(r"javascripts/([\w.-]+\.js)", done)


def test_a_page_loads_the_stepper_or_the_calculator_only_where_it_has_one():
    assert scripts_of(f"<p>Prose.</p>{PAGE_END}") == ["bundle.min.js", "a11y.js"]
    stepper = '<div class="fig-stepper" data-stepper role="group"><figure></figure></div>'
    assert "stepper.js" in scripts_of(stepper + PAGE_END)
    # the stepper's buttons alone are not a stepper
    assert "stepper.js" not in scripts_of("<button data-stepper-next>" + PAGE_END)
    form = '<form class="scaling-calculator" data-scaling-calculator aria-label="x"></form>'
    assert scripts_of(form + PAGE_END) == ["bundle.min.js", "scaling-calculator.js", "a11y.js"]


def test_a_page_without_the_script_tag_it_should_drop_fails_the_build():
    with pytest.raises(PluginError, match="chapters/test.md: expected one <script> for .*stepper"):
        scripts_of("<p>Prose.</p></body>")


def test_material_still_styles_names_as_plain_code_and_spaces_not_at_all():
    """The hook is right only while this holds; a Material update that colours names breaks it."""
    (material,) = importlib.util.find_spec("material").submodule_search_locations
    sheets = pathlib.Path(material) / "templates" / "assets" / "stylesheets"
    (main,) = sheets.glob("main.*.min.css")
    (palette,) = sheets.glob("palette.*.min.css")
    for sheet in (main, palette):
        css = sheet.read_text(encoding="utf-8")
        names = re.findall(r"--md-code-hl-name-color:\s*([^;}]+)", css)
        assert names and set(names) == {"var(--md-code-fg-color)"}, (sheet.name, names)
    main_css = main.read_text(encoding="utf-8")
    assert re.search(r"\.highlight \.n[,{]", main_css), "names are no longer styled as code"
    assert not re.search(r"\.highlight \.w[,{ ]", main_css), "Material now styles whitespace"
    ours = (ROOT / "docs" / "assets" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert "--md-code-hl-name-color" not in ours and not re.search(r"\.highlight \.[nw]\b", ours)
    # punctuation and operators: Material colours them through its variables alone, and ours
    # set those to plain code's colour, in one rule for every palette
    material_rules = re.findall(r"([^{}]*)\{([^{}]*)\}", main_css)
    our_rules = re.sub(r"/\*.*?\*/", "", ours, flags=re.S)
    for token, name in (("p", "punctuation"), ("o", "operator")):
        selector = f".highlight .{token}"
        styled = [body for sel, body in material_rules if selector in sel.split(",")]
        assert styled == [f"color:var(--md-code-hl-{name}-color)"], (token, styled)
        setting = rf"([^{{}}]*)\{{[^{{}}]*--md-code-hl-{name}-color:\s*([^;}}]+)"
        set_by_us = re.findall(setting, our_rules)
        assert [(s.strip(), v.strip()) for s, v in set_by_us] == [
            ("[data-md-color-scheme]", "var(--md-code-fg-color)")
        ], set_by_us
        assert not re.search(rf"\.highlight \.{token}\b", ours)


# ---------------------------------------------------------------------------------------------
# The failure gallery's error index (hooks/error_index.py)
# ---------------------------------------------------------------------------------------------
RANK_LINES = """\
  rank 0  RuntimeError: [/src/gloo/unbound_buffer.cc:78] Timed out waiting 2000ms for recv
  rank 1  died, killed by SIGABRT: [enforce fail at pair.cc:464] Received data size doesn't
  rank 1  returned sum [1.0, 2.0, 2.0] (no Error: here, and not an error either)
    ValueError: SyncBatchNorm layers only work with GPU modules
"""
GALLERY = """\
## 1. A collective inside `if rank == 0:`

<!-- lab:fail-a:stdout -->

## Find your error message

### Timed out waiting for recv

<!-- errors: Timed out waiting * for recv -->

### Received data size doesn't match

<!-- errors: Received data size doesn't -->

### SyncBatchNorm

<!-- errors: SyncBatchNorm * GPU -->
"""


def index_errors(markdown, stdout=RANK_LINES):
    records = {"fail-a": {"stdout": stdout}}
    return hook("error_index").render(markdown, records, slugify, "failures.md")


def test_errors_are_read_from_what_the_ranks_printed():
    assert hook("error_index").errors_in(RANK_LINES) == [
        "RuntimeError: [/src/gloo/unbound_buffer.cc:78] Timed out waiting 2000ms for recv",
        "[enforce fail at pair.cc:464] Received data size doesn't",
        "ValueError: SyncBatchNorm layers only work with GPU modules",
    ]


def test_each_error_is_shown_verbatim_under_its_section_with_a_link_to_its_case():
    page = index_errors(GALLERY)
    assert "<!-- errors" not in page
    link = "Printed in [1. A collective inside `if rank == 0:`](#1-a-collective-inside-if-rank-0)."
    assert page.count(link) == 3
    recv = page.split("### Timed out waiting for recv", 1)[1].split("###", 1)[0]
    assert "```{.text .error-message}\nRuntimeError: [/src/gloo/unbound_buffer.cc:78] " in recv
    assert "Received data size" not in recv


def test_an_error_no_section_names_fails_the_build():
    unnamed = GALLERY.replace("<!-- errors: SyncBatchNorm * GPU -->", "")
    with pytest.raises(PluginError, match=r"no `<!-- errors: ... -->` marker .*\n.*SyncBatchNorm"):
        index_errors(unnamed)


def test_a_section_whose_error_was_not_printed_fails_the_build_unless_it_is_sometimes():
    stale = GALLERY + "\n### Gone\n\n<!-- errors: Connection closed by peer -->\n"
    with pytest.raises(PluginError, match="no run on this page printed .*Connection closed"):
        index_errors(stale)
    sometimes = stale.replace("errors:", "errors-sometimes:").replace(
        "errors-sometimes: Timed", "errors: Timed"
    )
    assert "None of the runs behind this page printed it" in index_errors(sometimes)


def test_a_page_without_an_error_index_is_left_alone():
    plain = "## 1. Case\n\n<!-- lab:fail-a:stdout -->\n"
    assert index_errors(plain) == plain


# ---------------------------------------------------------------------------------------------
# A notebook page keeps only the JupyterLab CSS that can match it (hooks/notebooks.py)
# ---------------------------------------------------------------------------------------------
def used(css, classes):
    return hook("notebooks").used_css(css, set(classes))


def test_a_rule_that_needs_a_class_no_element_has_is_dropped():
    css = ".jp-Launcher { color: red } .jp-Cell .jp-InputArea { margin: 0 } pre { tab-size: 4 }"
    kept = used(css, {"jp-Cell", "jp-InputArea"})
    assert "jp-Launcher" not in kept
    assert ".jp-Cell .jp-InputArea" in kept and "pre" in kept  # no class needed: kept


def test_a_rule_is_kept_when_any_of_its_selectors_can_match():
    assert ".jp-Terminal, .jp-Cell" in used(".jp-Terminal, .jp-Cell { color: red }", {"jp-Cell"})


def test_classes_that_are_conditions_or_alternatives_do_not_drop_a_rule():
    css = (
        ".jp-Cell:not(.jp-mod-dropSource, .jp-mod-active) { a: 1 }"
        ":is(.jp-Gone, .jp-Cell) { b: 2 }"
        ":root { --jp-ui-font-size1: 13px }"
    )
    kept = used(css, {"jp-Cell"})
    assert "a: 1" in kept and "b: 2" in kept and "--jp-ui-font-size1" in kept


def test_media_blocks_are_filtered_inside_and_dropped_when_empty():
    css = (
        "@media (max-width: 760px) { .jp-Cell { a: 1 } .jp-Dialog { b: 2 } }"
        "@media print { .jp-Toolbar { c: 3 } }"
        "@font-face { font-family: X; src: url(x.woff2) }"
    )
    kept = used(css, {"jp-Cell"})
    assert "a: 1" in kept and "b: 2" not in kept and "@media print" not in kept
    assert "@font-face" in kept


def test_what_a_browser_cannot_parse_is_dropped():
    assert used(".jp-Cell { a: 1 } } stray", {"jp-Cell"}).strip() == ".jp-Cell { a: 1 }"
