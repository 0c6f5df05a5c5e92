"""The two small page hooks: math typeset at build time, code kept out of the search index.

They run on a page's HTML alone, so they are tested here on HTML strings; the built site's
pages are checked in a browser by test_browser.py (typeset math, page weight).
"""

import importlib.util
import types

import pytest
from mkdocs.exceptions import PluginError

from site_tests.conftest import ROOT


def hook(name):
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
