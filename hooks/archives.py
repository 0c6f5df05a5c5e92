"""MkDocs hook: zip declared project files into site/downloads/NAME.zip and link to it.

An archive is declared once in mkdocs.yml, under `extra.archives`:

    archives:
      exercises:
        base: exercises                 # files sit in the zip at their path below this folder
        paths: [exercises/*.py, exercises/pytest.ini]   # globs, from the repository root,
                                        # with every project module a script imports
        readme: exercises/README.md     # stored as NAME/README.md
      gloo-lab:
        base: code
        lab: gloo                       # instead of paths: a run declared under
        readme: code/readme/gloo-lab.md  # extra.lab_runs, with every module it imports
                                        # and its `inputs` that sit under base

and a page asks for its link with a marker on a line of its own:

    <!-- archive:exercises -->

which becomes "Download exercises.zip (N files, K KB)". Markers are replaced in the page's
HTML, after Markdown, so that a marker in a file the page includes with snippets works too.
Everything unpacks into one folder, NAME/. The zip is built when the configuration loads,
byte for byte the same for the same files (fixed timestamps, sorted names), and written in
on_post_build. A marker naming an unknown archive, a glob that matches nothing, a missing
README or a file outside `base` fails the build.
"""

import io
import pathlib
import re
import sys
import zipfile

from mkdocs.exceptions import PluginError
from mkdocs.utils import get_relative_url

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import labrunner  # noqa: E402

MARKER = re.compile(r"<!-- archive:(?P<name>[\w-]+) -->")
KEYS = {"base", "readme"}  # and one of CONTENTS
CONTENTS = {"paths", "lab"}
EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip can store: no build date inside
ARCHIVES = {}


class Archive:
    """One declared archive: the files it holds and the zip's bytes."""

    def __init__(self, name, spec, root, lab_runs):
        keys = set(spec) if isinstance(spec, dict) else set()
        if not (keys >= KEYS and len(keys - KEYS) == 1 and keys - KEYS <= CONTENTS):
            wanted = f"{sorted(KEYS)} and one of {sorted(CONTENTS)}"
            raise PluginError(f"archive {name!r}: needs exactly the keys {wanted}")
        self.name = name
        base = (root / spec["base"]).resolve()
        readme = root / spec["readme"]
        if not readme.is_file():
            raise PluginError(f"archive {name!r}: no README at {spec['readme']}")
        members = {f"{name}/README.md": readme}
        for path in contents(name, spec, root, lab_runs):
            if not path.resolve().is_relative_to(base):
                raise PluginError(f"archive {name!r}: {path} is outside {spec['base']}")
            members[f"{name}/{path.resolve().relative_to(base).as_posix()}"] = path
        self.members = members
        self.data = zipped(members)

    @property
    def uri(self):
        return f"downloads/{self.name}.zip"

    def link(self, page_url):
        kilobytes = max(1, round(len(self.data) / 1024))
        href = get_relative_url(self.uri, page_url)
        text = f"Download {self.name}.zip ({len(self.members)} files, {kilobytes} KB)"
        return f'<a class="md-button" href="{href}" download>{text}</a>'


def contents(name, spec, root, lab_runs):
    """The files an archive holds: its globs' matches, or a lab's script and imports."""
    if "lab" in spec:
        if spec["lab"] not in lab_runs:
            raise PluginError(f"archive {name!r}: no lab run {spec['lab']!r} is declared")
        try:
            run = labrunner.LabRun(spec["lab"], lab_runs[spec["lab"]], root)
            # and the files it runs without importing, where they sit beside it
            base = (root / spec["base"]).resolve()
            return [*run.sources, *(p for p in run.input_files if p.is_relative_to(base))]
        except labrunner.LabError as error:
            raise PluginError(str(error)) from None
    found = []
    for pattern in spec["paths"]:
        matched = sorted(path for path in root.glob(pattern) if path.is_file())
        if not matched:
            raise PluginError(f"archive {name!r}: {pattern!r} matches no file")
        found += matched
    # and every project module a script imports, directly or not: unpacked alone, it runs
    todo = [path for path in found if path.suffix == ".py"]
    while todo:
        for module in labrunner.project_imports(todo.pop(), root):
            if module not in (path.resolve() for path in found):
                found.append(module)
                todo.append(module)
    return found


def zipped(members):
    """The zip of `members` (name in the zip -> file), the same bytes for the same files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, members[name].read_bytes())
    return buffer.getvalue()


def on_config(config):
    root = pathlib.Path(config.config_file_path).resolve().parent
    declared = (config.extra or {}).get("archives") or {}
    labs = (config.extra or {}).get("lab_runs") or {}
    ARCHIVES.clear()
    ARCHIVES.update({name: Archive(name, spec, root, labs) for name, spec in declared.items()})
    return config


def on_page_content(html, page, config, files):
    """Markers become links in the page's HTML, so that included Markdown (snippets) counts."""

    def replace(match):
        name = match["name"]
        if name not in ARCHIVES:
            raise PluginError(f"{page.file.src_uri}: marker names unknown archive {name!r}")
        return ARCHIVES[name].link(page.url)

    return MARKER.sub(replace, html)


def on_post_build(config):
    for archive in ARCHIVES.values():
        target = pathlib.Path(config.site_dir) / archive.uri
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(archive.data)
