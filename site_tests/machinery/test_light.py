"""Pages as light as plain Material (issue 31): math as MathML alone, except where MathML renders
worse (hooks/katex_math.py). Code without punctuation and operator spans is tested with the other
page hooks (test_page_hooks.py); the pages' weight itself, beside plain Material, is the
Lighthouse gate's (test_browser.py)."""

import re

import pytest

from site_tests.machinery.test_page_hooks import PAGE, hook

# Chapter 2's table of collectives writes each rank's chunks so, in every row.
CHUNKS = "[c_{r0}, \\dots, c_{r,p-1}]"
# Chapter 3's gradient as a mean of means: display sums with limits, and an underbrace.
MEAN_OF_MEANS = (
    "\\begin{aligned}\\nabla L &= \\frac{1}{p}\\sum_{k=0}^{p-1}"
    " \\underbrace{\\frac{1}{b}\\sum_{i \\in D_k}\\nabla \\ell_i}_{\\nabla L_k}\\end{aligned}"
)


def typeset(markup):
    return hook("katex_math").on_page_content(markup, page=PAGE, config=None, files=None)


def inline(tex):
    return typeset(f'<span class="arithmatex">\\({tex}\\)</span>')


def display(tex):
    return typeset(f'<div class="arithmatex">\\[{tex}\\]</div>')


def elements(markup):
    return len(re.findall(r"<[a-zA-Z]", markup))


def test_a_formula_is_mathml_alone_with_its_tex_and_no_katex_html():
    page = inline(CHUNKS)
    assert "katex-html" not in page and "katex-mathml" not in page
    assert page.count("<math") == 1 and 'encoding="application/x-tex">' in page
    assert page.startswith('<span class="arithmatex" data-search-exclude><span class="katex">')


def test_mathml_alone_is_a_fraction_of_katex_html_and_its_copy():
    """The lever: chapter 2's chunk lists cost a third of the elements they did."""
    katex_math = hook("katex_math")
    both = katex_math.pykatex.renderToString(CHUNKS, displayMode=False, throwOnError=True)
    assert elements(inline(CHUNKS)) * 2.5 < elements(both), (elements(inline(CHUNKS)), both)


def test_a_display_formula_keeps_katex_displays_wrapper_and_is_a_block():
    page = display("2\\,\\frac{p-1}{p}\\,S < 2S")
    assert '<span class="katex-display"><span class="katex"><math' in page
    assert 'display="block"' in page and "katex-html" not in page


@pytest.mark.parametrize(
    ("tex", "is_display"),
    [(MEAN_OF_MEANS, True), ("\\sum_{k=0}^{p-1} x_k", True), ("\\underbrace{a+b}_{n}", False)],
)
def test_what_mathml_renders_worse_keeps_katex_html_and_its_mathml_copy(tex, is_display):
    page = display(tex) if is_display else inline(tex)
    assert 'class="katex-html"' in page and 'class="katex-mathml"' in page


def test_an_inline_sum_and_commands_that_merely_start_alike_stay_mathml():
    """Inline, MathML sets a sum with its limits beside it, as KaTeX does; `\\sum` is no prefix."""
    assert "katex-html" not in inline("\\sum_{i \\in D_k} \\nabla \\ell_i")
    katex_math = hook("katex_math")
    assert not katex_math.keeps_html("\\summation + \\integer", display=True)
    assert not katex_math.keeps_html("\\frac{1}{p}\\sum_k", display=False)
