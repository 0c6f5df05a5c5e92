"""The build shows each fence's output beneath it (hooks/fences.py), and keeps it current.

The contract, on a throw-away site: what a fence prints appears under it; a prose edit reruns
nothing; an edited fence or another torch reruns it; a failing fence fails the build with its
own traceback. Then, on the real site: every chapter fence that teaches shows its output.
"""

import importlib.util
import re
import textwrap

import pytest

from hooks import fence_parser
from hooks.fencerunner import skip_reason
from site_tests.conftest import ROOT, mkdocs_build

HOOK = ROOT / "hooks" / "fences.py"

PAGE = """\
# Demo

Some prose.

```python title="counted"
with open({log!r}, "a") as log:
    log.write("ran\\n")
print("seven times six is", 7 * 6)
```

??? note "How we know"

    ```python
    print("inside the fold")
    ```

```python
# fence: skip (shown, never run)
raise SystemExit("a skipped fence ran")
```

```python
x = 1  # prints nothing, so it gets no output block
```
"""


@pytest.fixture
def demo(tmp_path):
    """A one-page site with the fence hook; its first fence logs each time it really runs."""
    (tmp_path / "docs").mkdir()
    log = tmp_path / "runs.log"
    (tmp_path / "mkdocs.yml").write_text(
        textwrap.dedent(f"""\
        site_name: Demo
        hooks: [{HOOK}]
        markdown_extensions:
          - admonition
          - pymdownx.details
          - pymdownx.superfences
          - pymdownx.highlight
        """)
    )
    page = tmp_path / "docs" / "index.md"

    def write(text=PAGE):
        page.write_text(text.replace("{log!r}", repr(str(log))))

    def build():
        return mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site", tmp_path / "cache", 120)

    def runs():
        return log.read_text().count("ran") if log.exists() else 0

    def html():
        return (tmp_path / "site" / "index.html").read_text(encoding="utf-8")

    write()
    return write, build, runs, html


def outputs(markup):
    blocks = re.findall(r'<div class="[^"]*fence-output[^"]*"[^>]*>(.*?)</div>', markup, re.S)
    return [re.sub(r"<[^>]+>", "", block) for block in blocks]


def test_output_appears_under_its_fence_and_only_where_something_printed(demo):
    write, build, runs, html = demo
    proc = build()
    assert proc.returncode == 0, proc.stderr
    shown = outputs(html())
    assert len(shown) == 2, shown
    assert "seven times six is 42" in shown[0]
    assert "inside the fold" in shown[1]
    details = re.search(r"<details.*?</details>", html(), re.S).group(0)
    assert "inside the fold" in "".join(outputs(details)), "the output stays inside the fold"
    assert "a skipped fence ran" in html(), "the skipped fence is still shown"
    assert "fence: skip" not in html(), "without the marker, which is for the runners"
    assert runs() == 1


def test_prose_edits_rerun_nothing_and_fence_edits_rerun_the_fence(demo):
    write, build, runs, html = demo
    assert build().returncode == 0 and runs() == 1
    write(PAGE.replace("Some prose.", "Some edited prose."))
    assert build().returncode == 0 and runs() == 1, "a prose edit must come from the cache"
    assert "Some edited prose." in html()
    write(PAGE.replace("7 * 6", "6 * 7"))
    assert build().returncode == 0 and runs() == 2, "an edited fence runs again"


def test_a_failing_fence_fails_the_build_with_its_traceback(demo):
    write, build, _, _ = demo
    write(PAGE.replace('print("inside the fold")', 'assert 1 == 2, "the claim is false"'))
    proc = build()
    assert proc.returncode != 0
    assert "fence index.md:" in proc.stderr and "the claim is false" in proc.stderr


@pytest.mark.parametrize(
    "code, message",
    [
        ('import warnings; warnings.warn("old API", FutureWarning)', "FutureWarning: old API"),
        ("import os; open(os.devnull).read()", "ResourceWarning: unclosed file"),
    ],
    ids=["deprecation", "leaked-file"],
)
def test_warnings_fail_a_fence_as_they_do_in_the_tests(demo, code, message):
    write, build, _, _ = demo
    write(PAGE.replace('print("inside the fold")', code))
    proc = build()
    assert proc.returncode != 0 and message in proc.stderr


def test_the_key_covers_the_torch_version(monkeypatch):
    spec = importlib.util.spec_from_file_location("fences_hook", HOOK)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    (fence,) = hook.python_fences(["```python", "print(1)", "```"])
    key = hook.fence_key(fence)
    monkeypatch.setattr(hook.labrunner, "installed_torch", lambda: "2.99.0")
    assert hook.fence_key(fence) != key


def teaching_fence_count(markdown):
    """Fences a reader follows: top-level python fences that run (not `fence: skip`).

    Checks in a folded "How we know" block prove a claim; they need not print anything.
    """
    fences = fence_parser.python_fences(markdown)
    return sum(1 for fence in fences if not fence.nested and skip_reason(fence.code) is None)


def outside_folds(markup):
    """The page without its <details> folds (innermost first, so nesting is handled)."""
    while True:
        stripped = re.sub(r"<details[^>]*>(?:(?!<details).)*?</details>", "", markup, flags=re.S)
        if stripped == markup:
            return markup
        markup = stripped


ANNOTATION_MARKER = re.compile(r"#\s*\(\d+\)!?\s*$", re.MULTILINE)


def test_no_page_uses_a_code_annotation():
    """Material never mounts the annotations of a block it mounts lazily (content.lazy in
    mkdocs.yml): a `# (1)` marker would stay a bare comment, and its list a stray list."""
    marked = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "docs").rglob("*.md"))
        if ANNOTATION_MARKER.search(path.read_text(encoding="utf-8"))
    ]
    assert not marked, f"code annotations, which content.lazy never mounts: {marked}"


def test_an_annotation_marker_is_recognised():
    assert ANNOTATION_MARKER.search("    for p in model.parameters():  # (1)!\n")
    assert not ANNOTATION_MARKER.search("x = f(1)  # a call, not a marker\n")
