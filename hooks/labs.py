"""MkDocs hook: run the labs as real processes, cache what they print, embed it in pages.

A page asks for a run's output with a marker on a line of its own, for example

    <!-- lab:gloo:stdout -->

Runs are declared once, in mkdocs.yml under `extra.lab_runs` (name -> script, args, timeout).
At the start of every build, for each declared run (labrunner.py does the work):

1. its cache key is computed from the script's bytes, the bytes of every project module it
   imports, the torch and Python versions, and its arguments;
2. on a miss it is started as a reader would start it, `python SCRIPT ARGS --json OUT`, in a
   process group of its own with a timeout; a non-zero exit, a timeout or a traceback in what it
   printed fails the build and shows the lab's own error on the console;
3. what it printed, its JSON and its provenance (date, git commit, wall time) are stored in
   .cache/labs/NAME-KEY/record.json, which is all that pages are built from.

A run declared with `recorded: PATH` is never started by the build: PATH is a record made on
another machine by `python hooks/labrunner.py record NAME` (the NCCL lab needs GPUs), committed
with the sources. The views in the views/ package turn a record into Markdown and figures
(views/__init__.py lists them); a run's `shown_first:` names the code its source view shows
first, and a section it names that does not exist fails the build.

A page that embeds runs' output may also index the errors they printed, with
`<!-- errors: PATTERN -->` markers (see error_index.py), and the pages under docs/errors/ hold
one entry per error of code/errors/corpus.yml, with `<!-- error: ID -->` markers (see
error_entries.py).

The cache directory can be moved with LAB_CACHE_DIR (the tests build with an empty one).
"""

import pathlib
import sys

from markdown.extensions.toc import slugify as default_slugify
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

# mkdocs loads this file by path: make its siblings importable.
sys.path.insert(0, str(pathlib.Path(__file__).parent))
import error_entries  # noqa: E402
import error_index  # noqa: E402
import labrunner  # noqa: E402
import views  # noqa: E402
from views.common import Context  # noqa: E402
from views.source import shown_first  # noqa: E402

RUNS = {}
SHOWN_FIRST = {}  # run name -> the sections its source view shows first (views/source.py)
RECORDS = {}
ERRORS = {}  # code/errors/corpus.yml: the error index's entries (error_entries.py)


def on_config(config):
    root = pathlib.Path(config.config_file_path).resolve().parent
    declared = (config.extra or {}).get("lab_runs") or {}
    RUNS.clear()
    try:
        RUNS.update({name: labrunner.LabRun(name, spec, root) for name, spec in declared.items()})
    except labrunner.LabError as error:
        raise PluginError(str(error)) from None
    SHOWN_FIRST.clear()
    for name, run in RUNS.items():  # a declared section that is not there fails here
        SHOWN_FIRST[name] = shown_first(run, declared[name].get("shown_first", {}))
    ERRORS.clear()
    ERRORS.update(error_entries.load_corpus(root))
    error_entries.check_markers(config.docs_dir, ERRORS)
    return config


def on_files(files, config):
    """Bring every record up to date, then publish the lab sources and generated figures."""
    RECORDS.clear()
    for name, run in RUNS.items():
        try:
            RECORDS[name] = labrunner.load_record(run)
        except labrunner.LabError as error:
            raise PluginError(str(error)) from None
    for run in RUNS.values():
        for path in published(run):
            uri = path.relative_to(run.root).as_posix()
            if files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(path)))
    for old, new in ((config.extra or {}).get("moved_code") or {}).items():
        if (moved := files.get_file_from_path(new)) is None:
            raise PluginError(f"extra.moved_code: {new} (moved from {old}) is not published")
        # The same bytes at the old address: a link to a raw .py cannot be redirected.
        files.append(File.generated(config, old, abs_src_path=moved.abs_src_path))
    for name, record in RECORDS.items():
        cache = labrunner.cache_root(RUNS[name].root)
        for uri, content in views.artifacts(name, record, cache).items():
            files.append(File.generated(config, uri, content=content))
    return files


def published(run):
    """What a reader downloads beside a run's script: the modules it imports, and the files
    in code/ that it runs without importing (the two-node lab starts store_outsider.py)."""
    code = run.root / "code"
    return [*run.sources, *(path for path in run.input_files if path.is_relative_to(code))]


def on_page_markdown(markdown, page, config, files):
    slugify = (config.mdx_configs.get("toc") or {}).get("slugify", default_slugify)
    markdown = error_index.render(markdown, RECORDS, slugify, page.file.src_uri)
    markdown = error_entries.render(markdown, ERRORS, RECORDS, page.file.src_uri)

    def replace(match):
        name, view = match["run"], match["view"]
        if name not in RUNS:
            raise PluginError(f"{page.file.src_uri}: marker names unknown lab run {name!r}")
        context = Context(
            run=RUNS[name],
            record=RECORDS[name],
            page_uri=page.file.src_uri,
            shown_first=SHOWN_FIRST[name],
        )
        return views.render(view, context)

    markdown = views.MARKER.sub(replace, markdown)
    return views.render_drawings(markdown, page.file.src_uri)


def on_page_content(content, page, config, files):
    return error_index.lead_with_messages(content)


def on_post_build(config):
    """No page may show a traceback, whatever produced it."""
    site = pathlib.Path(config.site_dir)
    for path in site.rglob("*.html"):
        if labrunner.TRACEBACK in path.read_text(encoding="utf-8", errors="replace"):
            raise PluginError(f"{path.relative_to(site)} contains a Python traceback")
