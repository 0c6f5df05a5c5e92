"""MkDocs hook: execute the site's notebooks with our own runner; mkdocs-jupyter renders them.

mkdocs-jupyter can execute notebooks itself, but its cache keys on the notebook's bytes alone
(not the torch it ran on), nbclient has no timeout unless given one, and `allow_errors`
defaults to true. So mkdocs-jupyter is configured with `execute: false`, and this hook:

1. keys each notebook on its bytes, this file's bytes, and the torch and Python versions;
2. on a miss runs `python hooks/notebooks.py execute SRC DST` in a process group of its own,
   killed after NOTEBOOK_TIMEOUT_S; inside, nbclient gives every cell CELL_TIMEOUT_S and runs
   the notebook in a fresh temporary directory (a `%%writefile` lands there, not in docs/).
   A cell tagged `raises-exception` may fail; any other error fails the build;
3. merges each run of stream outputs into one (nbconvert's CoalesceStreamsPreprocessor): the
   kernel sends what a cell prints in pieces as its output thread flushes them, so one
   `print` can arrive split, and the page would break the line where the flush fell;
4. trims each traceback in the executed copy to its last line (the message is the lesson;
   the frames are noise, and no page may show a traceback, see labs.py's on_post_build);
5. stores the executed copy in the lab cache and points mkdocs-jupyter's page at it, so the
   page and its download are the notebook as it ran;
6. keeps, of the JupyterLab stylesheet mkdocs-jupyter inlines in the page (575 KB, for every
   widget JupyterLab has), only the rules that can match the page: a rule whose selectors all
   need a class no element of the notebook carries is dropped. No script adds JupyterLab
   classes later (mkdocs-jupyter's only script is its copy button), so what is dropped could
   never apply.
"""

import contextlib
import hashlib
import json
import logging
import os
import pathlib
import platform
import re
import signal
import subprocess
import sys
import tempfile

import tinycss2

# mkdocs loads this file by path: make its siblings importable.
sys.path.insert(0, str(pathlib.Path(__file__).parent))
import labrunner  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Both at pace's reference machine (code/pace.py), stretched on a slower one.
CELL_TIMEOUT_S = 120
NOTEBOOK_TIMEOUT_S = 300
EXPECTED_ERROR_TAG = "raises-exception"  # nbclient's own tag for a cell allowed to fail
LOG = logging.getLogger("mkdocs.hooks.notebooks")


# ---------------------------------------------------------------------------------------------
# Build side (MkDocs events)
# ---------------------------------------------------------------------------------------------
def cache_key(notebook):
    digest = hashlib.sha256()
    for part in (notebook.read_bytes(), pathlib.Path(__file__).read_bytes()):
        digest.update(part + b"\0")
    torch = labrunner.installed_torch()
    digest.update(f"torch=={torch}\0python=={platform.python_version()}".encode())
    return digest.hexdigest()[:16]


def executed_copy(notebook, cache):
    """The executed notebook for `notebook`, from the cache or by running it now."""
    # The file keeps its name: mkdocs-jupyter's download is named after it.
    target = cache / f"{notebook.stem}-{cache_key(notebook)}" / notebook.name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    timeout = labrunner.pace().limit(NOTEBOOK_TIMEOUT_S)  # measured once, handed to the kernel
    LOG.info(f"notebook {notebook.name}: executing (timeout {timeout:.0f} s)")
    partial = target.with_suffix(".partial")
    proc = subprocess.Popen(
        [sys.executable, __file__, "execute", str(notebook), str(partial)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the kernel and the ranks it starts die with the group
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        fail(notebook, f"timed out after {timeout:.0f} s", output)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode != 0:
        fail(notebook, f"failed (status {proc.returncode})", output)
    os.replace(partial, target)
    return target


def fail(notebook, what, output):
    from mkdocs.exceptions import PluginError

    tail = "\n".join(output.strip().splitlines()[-25:])
    raise PluginError(f"notebook {notebook.name} {what}:\n{tail}")


def notebook_cache():
    """Where executed notebooks and their trimmed stylesheets are kept: in the lab cache."""
    return labrunner.cache_root(ROOT) / "notebooks"


def on_files(files, config):
    """Point mkdocs-jupyter at the executed copy of each notebook in docs/."""
    cache = notebook_cache()
    for file in files:
        if file.src_uri.endswith(".ipynb"):
            file.abs_src_path = str(executed_copy(pathlib.Path(file.abs_src_path), cache))
    return files


STYLE_BLOCK = re.compile(r"(?P<open><style[^>]*>)(?P<css>.*?)(?P<close></style>)", re.S)
CLASS_ATTRIBUTE = re.compile(r'class="([^"]*)"')


def on_page_content(content, page, config, files):
    if not page.file.src_uri.endswith(".ipynb"):
        return content
    classes = {name for names in CLASS_ATTRIBUTE.findall(content) for name in names.split()}
    return STYLE_BLOCK.sub(
        lambda m: m["open"] + cached_used_css(m["css"], classes) + m["close"], content
    )


def cached_used_css(css, classes):
    """used_css, from the lab cache when this stylesheet and these classes were seen before:
    parsing 575 KB of CSS would add a quarter of a second to every rebuild under serve."""
    key = hashlib.sha256("\0".join([css, *sorted(classes)]).encode()).hexdigest()[:20]
    cached = notebook_cache() / f"css-{key}.css"
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    kept = used_css(css, classes)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(kept, encoding="utf-8")
    return kept


def used_css(css, classes):
    """The rules of `css` that can match an element carrying only `classes`."""

    def kept(rule):
        if rule.type == "error":  # a browser drops what it cannot parse, and so do we
            return ""
        if rule.type == "qualified-rule":
            return tinycss2.serialize([rule]) if may_match(rule.prelude, classes) else ""
        if rule.type == "at-rule" and rule.lower_at_keyword in ("media", "supports"):
            inner = "".join(map(kept, parse(rule.content or [])))
            prelude = tinycss2.serialize(rule.prelude)
            return f"@{rule.at_keyword}{prelude}{{{inner}}}" if inner else ""
        return tinycss2.serialize([rule])  # @font-face, @keyframes, ... as they are

    def parse(tokens):
        return tinycss2.parse_blocks_contents(tokens, skip_comments=True, skip_whitespace=True)

    rules = tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True)
    return "".join(map(kept, rules))


def may_match(prelude, classes):
    """False only if every selector of `prelude` (tokens) needs a class not in `classes`."""
    needed, selectors = set(), []
    for previous, token in zip([None, *prelude], prelude, strict=False):
        if token.type == "literal" and token.value == ",":
            selectors.append(needed)
            needed = set()
        elif token.type == "ident" and previous is not None and previous == ".":
            # `.name`. The classes inside :not(), :is(), :has() ... are conditions or
            # alternatives, not requirements: those are function tokens, skipped whole.
            needed.add(token.value)
    selectors.append(needed)
    return any(required <= classes for required in selectors)


# ---------------------------------------------------------------------------------------------
# Runner side (python hooks/notebooks.py execute SRC DST), in its own process
# ---------------------------------------------------------------------------------------------
def trim_tracebacks(nb):
    """Each traceback in the outputs cut down to its last line, the exception's message."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                output.traceback = [f"{output.ename}: {output.evalue}"]
            elif output.output_type == "stream" and "Traceback (most recent call last)" in (
                output.text
            ):
                lines = output.text.splitlines()
                kept = [ln for ln in lines if not ln.startswith((" ", "Traceback (most recent"))]
                output.text = "\n".join(kept) + "\n"


def execute(src, dst):
    import nbclient
    import nbformat
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor

    nb = nbformat.read(src, as_version=4)
    # The kernel finds this venv's torchrun, as it would in an activated environment.
    env_path = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["PATH"] = env_path
    # ipykernel relays what child processes write to fd 1 and 2 (the spawned ranks' errors)
    # only outside pytest; a test must see the notebook run exactly as a build runs it.
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    with tempfile.TemporaryDirectory(prefix="notebook-") as workdir:
        client = nbclient.NotebookClient(
            nb,
            timeout=round(labrunner.pace().limit(CELL_TIMEOUT_S)),  # nbclient takes whole seconds
            kernel_name="python3",
            allow_errors=False,  # only cells tagged raises-exception may fail
            resources={"metadata": {"path": workdir}},
        )
        client.execute()
    tagged = [c for c in nb.cells if EXPECTED_ERROR_TAG in c.get("metadata", {}).get("tags", [])]
    for cell in tagged:
        if not any(o.output_type == "error" for o in cell.outputs):
            sys.exit(f"a cell tagged {EXPECTED_ERROR_TAG} ran without error:\n{cell.source}")
    nb, _ = CoalesceStreamsPreprocessor().preprocess(nb, {})
    trim_tracebacks(nb)
    nbformat.write(nb, dst)
    summary = {"cells": len(nb.cells), "expected_errors": len(tagged)}
    print(json.dumps(summary))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "execute":
        sys.exit("usage: python hooks/notebooks.py execute SRC.ipynb DST.ipynb")
    execute(sys.argv[2], sys.argv[3])
