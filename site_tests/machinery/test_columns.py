"""hooks/columns.py on strings: which blocks are columns, and commands cut only between words.

test_browser.py checks what a reader sees at 390 and 1400 px; these check the rule itself and
that the markup it writes keeps a block's text and nesting as they were.
"""

import html
import re

from site_tests.machinery.test_page_hooks import hook

RANKS = """rank  node   GROUP_RANK  LOCAL_RANK  WORLD_SIZE
   0  node0           0           0           4
   1  node0           0           1           4"""
SCALING = """tokens/GPU  step (ms)  backward (ms)
     1,024       15.4           10.2
    16,384      245.8          163.8"""
PROSE = """torchrun's notice: setting OMP_NUM_THREADS environment variable for each process
to be 1 in default, to avoid your system being overloaded, please further tune the variable."""
GLOO = "  rank 0  RuntimeError: [/__w/pytorch/third_party/gloo/pair.cc:545] Read error" + (
    " Connection reset by peer." * 8
)


def test_aligned_lines_and_box_characters_are_columns():
    columns = hook("columns")
    assert columns.is_columns(RANKS)  # left-aligned: gaps end together
    assert columns.is_columns(SCALING)  # right-aligned numbers: gaps start together
    assert columns.is_columns("┌──┐\n│ 1│\n└──┘")


def test_prose_one_aligned_line_and_very_long_lines_are_not_columns():
    columns = hook("columns")
    assert not columns.is_columns(PROSE)
    assert not columns.is_columns("x = 1  # one aligned line\ny = 2 # no gap")
    assert not columns.is_columns("    indentation is no gap\n    so these are not\n    columns")
    assert not columns.is_columns(f"{GLOO}\n{GLOO}")  # gloo's message of hundreds: prose


def block(language, code):
    escaped = html.escape(code, quote=False)
    opening = f'<div class="language-{language} highlight"><pre><span></span>'
    return f"{opening}<code>{escaped}</code></pre></div>"


def test_a_table_like_output_is_marked_with_its_longest_line():
    columns = hook("columns")
    page = columns.on_page_content(block("text", RANKS), None, None, None)
    assert 'class="language-text highlight columns"' in page
    assert f"--columns-chars: {max(map(len, RANKS.splitlines()))}" in page
    python = columns.on_page_content(block("python", RANKS), None, None, None)
    assert "columns" not in python  # Python scrolls anyway


COMMAND = (
    'torchrun --nproc_per_node<span class="o">=</span><span class="m">8</span>'
    ' <span class="se">\\</span>\n    --ckpt-dir<span class="o">=</span>/tmp'
    ' <span class="c1"># a b</span>'
)


def test_each_argument_of_a_command_is_kept_whole_with_its_text_and_markup():
    columns = hook("columns")
    page = block("bash", "x")
    page = page.replace("<code>x</code>", f"<code>{COMMAND}</code>")
    kept = columns.on_page_content(page, None, None, None)
    code = re.search(r"<code>(.*)</code>", kept, re.S)[1]
    assert re.sub(r"<[^>]+>", "", code) == re.sub(r"<[^>]+>", "", COMMAND)  # same text
    words = re.findall(r'<span class="arg">((?:<span[^>]*>[^<]*</span>|[^<])*)</span>', code)
    plain = [re.sub(r"<[^>]+>", "", word) for word in words]
    assert plain == ["--nproc_per_node=8", "--ckpt-dir=/tmp"]  # the words a hyphen could break
    opened = len(re.findall(r"<span\b", code))
    assert opened == code.count("</span>")  # every span closed


def test_inline_code_in_a_table_of_prose_is_cut_only_between_words():
    columns = hook("columns")
    table = (
        '<table class="course-table course-table--cards"><tr><td>'
        "<code>--master_addr=127.0.0.1 --master_port=&lt;port&gt; x</code> <code>one</code>"
        "</td></tr></table>"
    )
    kept = columns.on_page_content(table, None, None, None)
    assert (
        '<code><span class="arg">--master_addr=127.0.0.1</span> '
        '<span class="arg">--master_port=&lt;port&gt;</span> x</code> <code>one</code>'
    ) in kept
    plain = '<table class="course-table"><tr><td><code>a-b c</code></td></tr></table>'
    assert columns.on_page_content(plain, None, None, None) == plain  # a table of values


def test_a_word_too_long_for_a_phones_line_is_left_free_to_break():
    columns = hook("columns")
    long = '"CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}"'
    assert len(long) > columns.KEEP_CHARS
    assert columns.words_kept_whole(f"echo {long} one-node") == (
        f'echo {long} <span class="arg">one-node</span>'
    )
    # measured as a reader sees it: `&lt;port&gt;` is six characters
    kept = columns.words_kept_whole("--rdzv_endpoint=127.0.0.1:&lt;port&gt;")
    assert kept.startswith('<span class="arg">')
