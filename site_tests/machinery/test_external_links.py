"""site_tests/tools/external_links.py: every link that leaves the site, once, with its pages."""

import subprocess
import sys

from site_tests.conftest import ROOT, pace

SCRIPT = ROOT / "site_tests" / "tools" / "external_links.py"


def run(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=pace.limit(30),
    )


def test_lists_each_external_link_once_with_its_pages(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="https://arxiv.org/abs/2006.15704">paper</a> <a href="guide/">local</a>'
        '<img src="//cdn.example.org/x.png" alt="x"> <a href="#top">anchor</a>'
        '<a href="mailto:someone@example.org">mail</a>'
    )
    (tmp_path / "guide" / "index.html").write_text(
        '<a href="https://arxiv.org/abs/2006.15704">same paper</a>'
        '<a href="http://example.org/a?b=1&amp;c=2">query</a>'
    )
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "//cdn.example.org/x.png",
        "    index.html",
        "http://example.org/a?b=1&c=2",
        "    guide/index.html",
        "https://arxiv.org/abs/2006.15704",
        "    guide/index.html",
        "    index.html",
    ]
    assert "3 external links on 2 pages" in proc.stderr
    assert run(tmp_path, "--urls").stdout.split() == [
        "//cdn.example.org/x.png",
        "http://example.org/a?b=1&c=2",
        "https://arxiv.org/abs/2006.15704",
    ]


def test_an_empty_folder_is_an_error(tmp_path):
    proc = run(tmp_path)
    assert proc.returncode == 1 and "build the site first" in proc.stderr
