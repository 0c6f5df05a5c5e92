"""MkDocs hook: run every python fence of a page at build time and show its output beneath it.

The fence tests (`nox -s fences`) prove that each fence passes; this hook shows the reader what
it printed. For each page:

1. every python fence is found by hooks/fence_parser.py, the parser the fence tests collect
   with, so the build runs exactly the fences the tests do (fences inside `???` folds count);
2. its cache key is the fence's text plus the torch and Python versions it runs on;
3. the fences without a cached result run together in one child process
   (`hooks/fencerunner.py`, with a timeout, deprecations as errors, as the tests run them);
   one that fails fails the build with its traceback;
4. what each printed is inserted after it as an "Output" block; a fence that prints nothing
   gets none.

Results live in `.cache/labs/fences/KEY.json` (beside the labs' cache, moved with it by
LAB_CACHE_DIR), so a prose edit under `mkdocs serve` reruns nothing. A fence whose first line is
`# fence: skip (reason)` is not run, here or in the tests, and the reader sees it without that
line: the page's prose says why it does not run.

This hook must come before hooks/labs.py in mkdocs.yml: the labs' views add python blocks of
their own (lab sources), which are shown, not run.
"""

import hashlib
import json
import pathlib
import platform
import subprocess
import sys
import tempfile

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import fence_parser  # noqa: E402
import fencerunner  # noqa: E402
import labrunner  # noqa: E402

RUNNER = pathlib.Path(__file__).with_name("fencerunner.py")
PAGE_TIMEOUT_S = (
    180  # all of one page's uncached fences, torch import included, at pace's reference
)
PARSER = fence_parser.parser()


def python_fences(lines):
    """The python fences of a page's `lines`, as the fence tests collect them."""
    return fence_parser.python_fences("\n".join(lines), PARSER)


def fence_key(fence):
    """The fence's cache key: its text, the runner, and the torch and Python it runs on."""
    versions = f"torch=={labrunner.installed_torch()} python=={platform.python_version()}"
    digest = hashlib.sha256(f"{versions}\0{RUNNER.read_text()}\0{fence.code}".encode())
    return digest.hexdigest()[:20]


def skipped(fence):
    return fencerunner.skip_reason(fence.code) is not None


def cache_folder(config):
    root = pathlib.Path(config.config_file_path).resolve().parent
    return labrunner.cache_root(root) / "fences"


def run_uncached(fences, page, config):
    """Run the fences that have no cached output, in one process; cache what they print."""
    folder = cache_folder(config)
    todo = [f for f in fences if not skipped(f) and not (folder / f"{fence_key(f)}.json").is_file()]
    if not todo:
        return
    root = pathlib.Path(config.config_file_path).resolve().parent
    with tempfile.TemporaryDirectory(prefix="fences-") as scratch:
        jobs, results = pathlib.Path(scratch) / "jobs.json", pathlib.Path(scratch) / "out.json"
        ids = {f"{page.file.src_uri}:{f.line}": f for f in todo}
        jobs.write_text(json.dumps([{"id": i, "code": f.code} for i, f in ids.items()]))
        command = [
            sys.executable,
            *fencerunner.WARNINGS_AS_ERRORS,
            str(RUNNER),
            str(jobs),
            str(results),
        ]
        try:
            subprocess.run(
                command, cwd=root, timeout=labrunner.pace().limit(PAGE_TIMEOUT_S), check=True
            )
        except (subprocess.SubprocessError, OSError) as error:
            raise PluginError(f"{page.file.src_uri}: the fence runner failed: {error}") from None
        outcomes = json.loads(results.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    for outcome in outcomes:
        if outcome["error"]:
            raise PluginError(f"fence {outcome['id']} failed:\n{outcome['error']}")
        fence = ids[outcome["id"]]
        (folder / f"{fence_key(fence)}.json").write_text(json.dumps({"stdout": outcome["stdout"]}))


def output_block(fence, stdout):
    """The Markdown of an "Output" block at the fence's own indentation."""
    body = [fence.indent + line if line else "" for line in stdout.rstrip("\n").split("\n")]
    opening = f'{fence.indent}``` {{ .text .fence-output title="Output" }}'
    return ["", opening, *body, f"{fence.indent}```"]


def on_page_markdown(markdown, page, config, files):
    lines = markdown.split("\n")
    fences = python_fences(lines)
    if not fences:
        return markdown
    run_uncached(fences, page, config)
    folder = cache_folder(config)
    for fence in reversed(fences):  # from the bottom, so earlier line numbers stay valid
        if skipped(fence):
            first = next(i for i in range(fence.line, fence.end) if lines[i].strip())
            del lines[first]  # the skip marker is for the runners, not for the reader
            continue
        stdout = json.loads((folder / f"{fence_key(fence)}.json").read_text())["stdout"]
        if stdout.strip():
            lines[fence.end + 1 : fence.end + 1] = output_block(fence, stdout)
    return "\n".join(lines)
