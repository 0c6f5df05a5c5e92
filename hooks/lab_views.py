"""Views of a lab record: the Markdown (and figures) that replace `<!-- lab:NAME:VIEW -->`.

A record is what hooks/labs.py stores for one run: the command, what it printed, its --json
result and its provenance. Every number a view shows is read from a record; none is typed here.
"""

import dataclasses
import functools
import hashlib
import io
import pathlib
import posixpath
import re

from mkdocs.exceptions import PluginError

# Where a page embeds a view: on a line of its own. hooks/labs.py replaces each one;
# hooks/error_index.py finds the runs whose output (view `stdout`) a page shows.
MARKER = re.compile(r"^<!-- lab:(?P<run>[\w-]+):(?P<view>[\w-]+) -->$", re.MULTILINE)
VIEWS = {}


@dataclasses.dataclass
class Context:
    run: object  # labs.LabRun
    record: dict | None  # None: a recorded run that has not been recorded yet
    page_uri: str

    @property
    def root(self):
        """The project root, where the run's paths are relative to."""
        return self.run.root

    @property
    def result(self):
        return self.record["result"]

    def link(self, uri):
        """`uri` (relative to the site root) as a link relative to this page."""
        return posixpath.relpath(uri, posixpath.dirname(self.page_uri) or ".")


def view(name):
    def register(function):
        VIEWS[name] = function
        return function

    return register


def render(name, context):
    if name not in VIEWS:
        raise PluginError(f"{context.page_uri}: unknown lab view {name!r} (known: {sorted(VIEWS)})")
    if context.record is None and name not in ("command", "source"):
        # Say it once, where the provenance would be; the other views have nothing to show.
        return not_recorded(context) if name == "provenance" else ""
    return VIEWS[name](context)


def not_recorded(context):
    record = context.run.recorded.relative_to(context.root).as_posix()
    return (
        '!!! warning "No run recorded yet"\n\n'
        f"    This run needs a GPU, which the machines that build this site do not have, and "
        f"none has been recorded yet (`{record}` "
        "does not exist). Its output will appear here once someone runs `nox -s record-gpu` "
        "on a GPU machine and commits the file.\n"
    )


def fence(language, body, title=None):
    attributes = f' title="{title}"' if title else ""
    return f"```{language}{attributes}\n{body.rstrip()}\n```\n"


# A lab that prints its report in parts opens each with a line `== PART ==` (the two-node and
# Slurm labs); a page embeds one part where it explains it.
PART = re.compile(r"^== ([\w-]+) ==\n(.*?)(?=^== |\Z)", re.MULTILINE | re.DOTALL)


def part_views(prefix, parts):
    """Register a view PREFIX-PART for each of `parts`: that block of the run's output."""
    for name in parts:
        view(f"{prefix}-{name}")(functools.partial(part_view, name))


def part_view(name, context):
    """Block `name` of the run's output, as a text fence titled with where it ran."""
    blocks = dict(PART.findall(context.record["stdout"]))
    if name not in blocks:
        raise PluginError(f"lab run {context.run.name!r}: no `== {name} ==` block in its record")
    where = "recorded" if context.run.recorded is not None else "printed when this site was built"
    return fence("text", blocks[name], f"{name}: {where} ({context.record['started_utc']})")


# ---------------------------------------------------------------------------------------------
# Views every lab has
# ---------------------------------------------------------------------------------------------
@view("command")
def command_view(context):
    return fence("bash", " ".join(context.run.command))


@view("stdout")
def stdout_view(context):
    if context.run.recorded is not None:
        title = f"Printed on {machine(context.result)}, {context.record['started_utc']}"
    else:
        title = f"Printed when this site was built ({context.record['started_utc']})"
    return fence("text", context.record["stdout"], title)


@view("provenance")
def provenance_view(context):
    """One line a reader sees (torch, date, machine); every fact one click away."""
    record, env = context.record, context.result["env"]
    where = "recorded on another machine" if context.run.recorded else "run by this site's build"
    rows = [
        ("Command", f"`{' '.join(record['command'])}`"),
        ("When", record["started_utc"]),
        ("Wall time", f"{record['wall_s']:.2f} s (whole command, interpreter start included)"),
        ("torch", f"`{env['torch']}`"),
        ("Python", env["python"]),
        ("Machine", f"{machine(context.result)}, {env['platform']}"),
        ("Sources at commit", f"`{record['git_commit']}`"),
    ]
    if gpu := context.result.get("gpu"):
        rows += [
            (
                "GPU",
                f"{gpu['count']}× {gpu['model']} ({gpu['memory_GiB']} GiB, "
                f"compute capability {gpu['capability']})",
            ),
            ("Driver, CUDA, NCCL", f"{gpu['driver']}, {gpu['cuda']}, {gpu['nccl']}"),
        ]
    # A list of facts, not a table: Material rebuilds every table once the page has loaded,
    # which makes a phone restyle the whole page once more.
    facts = "\n\n".join(f"    {label}\n    :   {value}" for label, value in rows)
    line = (
        f"Ran with torch `{env['torch']}` on {machine(context.result)}, "
        f"{record['started_utc']} ({where})."
    )
    return (
        f'<p class="lab-provenance" markdown="1">{line}</p>\n\n'
        '??? info "Provenance of this run"\n\n'
        f"{facts}\n"
    )


@view("source")
def source_view(context):
    """The DDP code first, then the script and the modules it imports, folded, downloadable.

    What a reader came for is the data-parallel code; what surrounds it (arguments, launching,
    fault injection, checkpoints) exists for the tests. So a section of an imported module
    that constructs DistributedDataParallel is shown first, and the script is folded after it;
    a script without such a section is itself shown first. A module that an earlier script on
    the same page already embedded is linked to, not embedded again; the machinery around the
    labs (MACHINERY) is offered for download only.
    """
    script = context.run.script
    helpers = [path for path in context.run.sources if path != script]
    shown = SHOWN_ON_PAGE.setdefault(context.page_uri, set())

    def relative(path):
        return path.relative_to(context.root).as_posix()

    def download(path):
        return f"[`{relative(path)}`]({context.link(relative(path))}){{: download }}"

    shown_helpers = [path for path in helpers if relative(path) not in MACHINERY]

    text = f"Download {download(script)}"
    if helpers:
        text += ", and the modules it imports, which must sit in the same folder: " + ", ".join(
            download(path) for path in helpers
        )
    code = context.root / "code"
    if started := [p for p in context.run.input_files if p.is_relative_to(code)]:
        text += "; it also runs " + ", ".join(download(path) for path in started)
        text += ", which must sit beside it too"
    text += ".\n\n"
    first = [
        (path, title, body)
        for path in helpers
        for title, body in banner_sections(path.read_text(encoding="utf-8"))
        if DDP_CONSTRUCTED in body
    ]
    for path, title, body in first:
        text += fence("python", body, f"{relative(path)}: {title}") + "\n"
    script_fence = fence("python", script.read_text(encoding="utf-8"), relative(script))
    text += folded(relative(script), script_fence) if first else script_fence
    again = []
    for path in shown_helpers:
        if path in shown:
            again.append(path)
            continue
        shown.add(path)
        listing = path.read_text(encoding="utf-8")
        for section_path, title, section in first:
            if section_path == path:  # shown in full above: once is enough for the page
                listing = listing.replace(section, f"# ({title}: shown above.)")
        body = fence("python", listing, relative(path))
        text += folded(relative(path), body, anchor=source_anchor(relative(path)))
    if again:
        links = ", ".join(
            f"[`{relative(path)}`](#{source_anchor(relative(path))})" for path in again
        )
        text += f"\nIt also imports {links}, shown with an earlier script on this page.\n"
    return f'<div markdown="1" {NOT_SEARCHED}>\n\n{text}\n</div>\n'


# What every lab imports to be run, timed and recorded, and the failure gallery's harness: the
# machinery around a lab, which a reader downloads with it but does not study. Shown in full, the
# three modules and the harness took about 70 KB of the gallery page's 345 KB.
MACHINERY = {
    "code/pace.py",
    "code/provenance.py",
    "code/lab_cli.py",
    "code/launcher.py",
    "code/failures/harness.py",
}


# Which project modules each page has embedded so far in this build: {page uri: {path}}.
# artifacts() runs for every lab at the start of each build, before any page, and resets it.
SHOWN_ON_PAGE = {}
DDP_CONSTRUCTED = "DistributedDataParallel("
BANNER = re.compile(r"^# -{20,}\n# (?P<title>.+)\n# -{20,}\n", re.MULTILINE)


def banner_sections(source):
    """(title, code) for each section a `# ----` / `# Title` / `# ----` banner opens."""
    marks = list(BANNER.finditer(source))
    ends = [mark.start() for mark in marks[1:]] + [len(source)]
    return [
        (mark["title"].strip(), source[mark.end() : end].strip("\n"))
        for mark, end in zip(marks, ends, strict=False)  # no banner: no section
    ]


def source_anchor(relative_path):
    return "source-" + re.sub(r"[^a-z0-9]+", "-", relative_path.lower()).strip("-")


def folded(summary, body, anchor=None):
    where = f' id="{anchor}"' if anchor else ""
    return (
        f'\n<details class="quote"{where} markdown="1" {NOT_SEARCHED}>\n'
        f"<summary>{summary}</summary>\n\n{body}\n</details>\n"
    )


# Material's search skips elements carrying this attribute (each must carry it: a <details>
# inside an excluded <div> is indexed again). Source code would double the search index, and
# search finds the prose that explains the code.
NOT_SEARCHED = 'data-search-exclude="true"'


def machine(result):
    """Where a run ran, in a few words: its GPUs if it used any, else its CPU."""
    if gpu := result.get("gpu"):
        return f"{gpu['count']}× {gpu['model']}"
    env = result["env"]
    return f"{env['cpu_model']} ({env['cpu_count']} cores)"


# ---------------------------------------------------------------------------------------------
# The DDP labs: results table and all_reduce sweep
# ---------------------------------------------------------------------------------------------
VARIANT_LABELS = {
    "naive": "Naive DDP (broadcast, then all_reduce and divide)",
    "ddp": "DistributedDataParallel",
    "ddp_no_sync": "DistributedDataParallel with `no_sync` (2 micro-batches)",
}


def number(value):
    return f"{value:.2e}" if value != 0 else "0"


@view("results")
def results_view(context):
    result = context.result
    rows = [
        (f"{label}: largest \\|Δ\\| from the full-batch reference", number(diff["max_abs_diff"]))
        for key, label in VARIANT_LABELS.items()
        if (diff := result["variants"].get(key)) is not None
    ]
    rows += [
        ("Negative control (own shard, no communication)", number(result["control_max_abs_diff"])),
        ("Replicas bit-identical after training", yes_no(result["replicas_identical"])),
        ("Collectives matching their closed forms", collectives_summary(result["collectives"])),
        ("DDP gradient buckets", str(result["ddp_buckets"])),
        (
            "reduce_scatter with `ReduceOp.AVG`",
            f"{result['reduce_scatter_avg_behaviour']} (rank 0 got "
            f"{result['reduce_scatter_avg_value']:g} from inputs 1 … {result['world_size']})",
        ),
    ]
    allreduce, memcpy = result["allreduce_4mib"], result["memcpy_4mib"]
    rows += [
        ("4 MiB all_reduce: median time", f"{allreduce['seconds'] * 1e3:.2f} ms"),
        (
            "4 MiB all_reduce: algbw / busbw",
            f"{allreduce['algbw_GBps']:.2f} / {allreduce['busbw_GBps']:.2f} GB/s",
        ),
        (
            "4 MiB memory copy (`copy_`) on the same machine, each byte copied counted once",
            f"{memcpy['GBps']:.2f} GB/s",
        ),
        ("busbw as a fraction of the memory copy", f"{result['busbw_over_memcpy']:.3f}"),
    ]
    table = "\n".join(f"| {label} | {value} |" for label, value in rows)
    caption = (
        f"World size {result['world_size']}, {result['steps']} steps, launched with "
        f"{result['launcher']}; torch `{result['env']['torch']}` on {machine(result)}, "
        f"{context.record['started_utc']}."
    )
    return f"| Check | Result |\n|---|---|\n{table}\n\n{caption}\n"


def yes_no(flag):
    return "yes" if flag else "**no**"


def collectives_summary(flags):
    """ "8 of 8", or which failed, and which could not run (null: the ring at world size 1)."""
    ran = {name: ok for name, ok in flags.items() if ok is not None}
    failed = [name for name, ok in ran.items() if not ok]
    skipped = [name for name, ok in flags.items() if ok is None]
    summary = f"{len(ran) - len(failed)} of {len(ran)}"
    if failed:
        summary += f" (failed: {', '.join(failed)})"
    if skipped:
        summary += f"; not run at this world size: {', '.join(skipped)}"
    return summary


def sweep_uri(name):
    return f"assets/labs/{name}/allreduce-sweep.svg"


def sweep_dark_uri(name):
    return f"assets/labs/{name}/allreduce-sweep-dark.svg"


# The smallest text a figure may render at, in CSS pixels, on any screen, and the width of
# the content column on a 390 px phone.
LEGIBLE_PX, PHONE_COLUMN_PX = 11, 358

# The sweep figure's size in points (the SVG's user units) and its smallest text: drawn this
# size, it fits a phone's 358 px column with that text at LEGIBLE_PX or more.
SWEEP_SIZE_IN, SWEEP_SMALLEST_PT = (4.8, 6.6), 11


@view("sweep")
def sweep_view(context):
    result = context.result
    p, sweep = result["world_size"], result["sweep"]
    smallest, largest = (human_bytes(point["bytes"]) for point in (sweep[0], sweep[-1]))
    peak = max(sweep, key=lambda point: point["busbw_GBps"])
    under = all(point["busbw_GBps"] < point["memcpy_GBps"] for point in sweep)
    alt = (
        f"Two panels, one above the other, for a {p}-rank all_reduce from {smallest} to "
        f"{largest}, both with logarithmic axes. Top: measured time against message size, with "
        "the fitted ring model. Bottom: bus bandwidth against message size, peaking at "
        f"{peak['busbw_GBps']:.2f} GB/s at {human_bytes(peak['bytes'])}, with the ring model "
        f"and the memory-copy bandwidth measured in the same run; the measured points lie "
        f"{'below' if under else 'not always below'} the memory copy."
    )
    rows = "\n".join(
        f"    | {human_bytes(point['bytes'])} | {point['seconds'] * 1e3:.3f} | "
        f"{point['algbw_GBps']:.3f} | {point['busbw_GBps']:.3f} | {point['memcpy_GBps']:.2f} |"
        for point in sweep
    )
    fit = ring_fit(result)
    width, height = (inches * 96 for inches in SWEEP_SIZE_IN)  # CSS pixels
    # lazy: the browser then never fetches the palette's image that is hidden
    size = f'width="{width:.0f}" height="{height:.0f}" loading="lazy"'
    # Material shows the #only-light image in the light palette and #only-dark in the dark one.
    images = (
        f"![{alt}]({context.link(sweep_uri(context.run.name))}#only-light){{ {size} }}\n"
        f"![{alt}]({context.link(sweep_dark_uri(context.run.name))}#only-dark){{ {size} }}"
    )
    # Its user units are points: the smallest text reaches LEGIBLE_PX at this many pixels wide.
    legible = 72 * SWEEP_SIZE_IN[0] * LEGIBLE_PX / SWEEP_SMALLEST_PT
    return (
        f'<div class="fig-scroll fig-sweep" markdown="1" style="--fig-min-width: '
        f'{legible:.0f}px">\n\n{images}\n\n</div>\n\n'
        f"The ring model fitted to these points: a fixed cost of "
        f"{fit['alpha_s'] * 1e6:.0f} µs per all_reduce plus "
        f"\\(2(p-1)/p \\cdot S\\) bytes at {fit['beta_GBps']:.2f} GB/s.\n\n"
        '??? abstract "The measured points"\n\n'
        "    | Size | Time (ms) | algbw (GB/s) | busbw (GB/s) | memory copy (GB/s) |\n"
        "    |---:|---:|---:|---:|---:|\n"
        f"{rows}\n"
    )


@view("nccl-results")
def nccl_results_view(context):
    """The GPU lab: the gloo lab's table, then the sweep in both dtypes and the DDP step."""
    result = context.result
    fp32 = {point["bytes"]: point for point in result["sweep"]}
    bf16 = {point["bytes"]: point for point in result["sweep_bf16"]}
    sweep_rows = "\n".join(
        f"| {human_bytes(size)} | {cell(fp32.get(size))} | {cell(bf16.get(size))} |"
        for size in sorted(fp32.keys() | bf16.keys())
    )
    step = result["ddp_step"]
    hidden = 1 - step["exposed_comm_s"] / step["allreduce_gradients_s"]
    step_rows = [
        ("Model", f"{step['model']}, {step['parameters']:,} parameters, batch {step['batch']}"),
        ("Gradient bytes, buckets", f"{human_bytes(step['gradient_bytes'])}, {step['buckets']}"),
        ("Step without communication (`no_sync`)", f"{step['compute_only_s'] * 1e3:.2f} ms"),
        ("Step with DDP's bucketed all_reduce", f"{step['with_comm_s'] * 1e3:.2f} ms"),
        ("Communication left exposed", f"{step['exposed_comm_s'] * 1e3:.2f} ms"),
        ("The same gradients all-reduced alone", f"{step['allreduce_gradients_s'] * 1e3:.2f} ms"),
        ("Share of that all_reduce hidden under backward", f"{hidden:.0%}"),
    ]
    note = f"!!! note\n\n    {result['note']}\n\n" if result.get("note") else ""
    return (
        note + results_view(context) + "\n### all_reduce from 4 KiB to 1 GiB\n\n"
        "Median time and bus bandwidth (nccl-tests' busbw) per message size.\n\n"
        "| Size | float32: time, busbw | bfloat16: time, busbw |\n|---:|---:|---:|\n"
        f"{sweep_rows}\n\n### One DDP training step\n\n| Measure | Value |\n|---|---|\n"
        + "\n".join(f"| {label} | {value} |" for label, value in step_rows)
        + "\n"
    )


def cell(point):
    if point is None:
        return "–"
    return f"{point['seconds'] * 1e3:.3f} ms, {point['busbw_GBps']:.1f} GB/s"


def human_bytes(count):
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:g} {unit}"
    return f"{count} B"


def ring_fit(result):
    """Fit t = alpha + (2(p-1)/p) * S / beta to the sweep: the ring model's two parameters.

    The sizes span four orders of magnitude, so the fit minimises relative error (each point
    weighted by 1/t); a plain least-squares fit would be decided by the largest sizes alone.
    """
    p = result["world_size"]
    u = [1 / point["seconds"] for point in result["sweep"]]
    v = [2 * (p - 1) / p * point["bytes"] / point["seconds"] for point in result["sweep"]]
    suu, suv, svv = (
        sum(a * a for a in u),
        sum(a * b for a, b in zip(u, v, strict=True)),
        sum(b * b for b in v),
    )
    su, sv = sum(u), sum(v)
    determinant = suu * svv - suv * suv
    alpha = (su * svv - sv * suv) / determinant
    slope = (suu * sv - suv * su) / determinant
    if alpha < 0:  # latency cannot be negative: fit the bandwidth term alone
        alpha, slope = 0.0, sv / svv
    return {"alpha_s": alpha, "beta_GBps": 1 / slope / 1e9, "slope": slope}


def artifacts(name, record, cache):
    """Files a record contributes to the site, {uri: bytes}, from every registered figure maker.

    A figure is cached beside the lab records under a key of the record and the makers' code,
    so an unchanged build renders nothing and imports no plotting library.
    """
    SHOWN_ON_PAGE.clear()  # a new build: no page has embedded anything yet
    if record is None:
        return {}
    files = {}
    for maker in FIGURES:
        if not maker.applies(record["result"]):
            continue
        uri = maker.uri(name)
        digest = hashlib.sha256(record["key"].encode() + name.encode())
        digest.update(pathlib.Path(maker.render.__code__.co_filename).read_bytes())
        cached = cache / f"figure-{digest.hexdigest()[:16]}-{posixpath.basename(uri)}"
        if not cached.is_file():
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_bytes(maker.render(record["result"]))
        files[uri] = cached.read_bytes()
    return files


@dataclasses.dataclass(frozen=True)
class Figure:
    """A figure made from a record: where it goes, which records have one, how to draw it."""

    uri: object  # run name -> site URI
    applies: object  # result -> bool
    render: object  # result -> bytes


FIGURES = []


# Colours for the plot on each palette: Material's text on white, and on its slate background.
SWEEP_STYLES = {
    "light": {"text": "#000000de", "grid": "#00000040", "frame": "#ffffff"},
    "dark": {"text": "#e2e4e9", "grid": "#e2e4e940", "frame": "#1e2129"},
}


def sweep_figure(result, palette="light"):
    """all_reduce time and bus bandwidth against size, log-log, with the ring model (SVG).

    Transparent, in the palette's text colour: the page's background shows through, so the
    light and dark renderings each sit on their own palette.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style = SWEEP_STYLES[palette]
    colours = {
        "svg.fonttype": "none",
        "font.size": SWEEP_SMALLEST_PT + 1,
        "axes.titlesize": SWEEP_SMALLEST_PT + 1,
        "axes.labelsize": SWEEP_SMALLEST_PT,
        "xtick.labelsize": SWEEP_SMALLEST_PT,
        "ytick.labelsize": SWEEP_SMALLEST_PT,
        "legend.fontsize": SWEEP_SMALLEST_PT,
        "text.color": style["text"],
        "axes.labelcolor": style["text"],
        "axes.edgecolor": style["text"],
        "xtick.color": style["text"],
        "ytick.color": style["text"],
        "grid.color": style["grid"],
        "legend.facecolor": style["frame"],
        "legend.edgecolor": style["grid"],
    }
    p, sweep, fit = result["world_size"], result["sweep"], ring_fit(result)
    sizes = [point["bytes"] for point in sweep]
    model_t = [fit["alpha_s"] + fit["slope"] * 2 * (p - 1) / p * s for s in sizes]
    bus = 2 * (p - 1) / p
    with plt.rc_context(colours):
        fig, (top, bottom) = plt.subplots(2, 1, figsize=SWEEP_SIZE_IN, layout="constrained")
        top.loglog(sizes, [pt["seconds"] * 1e3 for pt in sweep], "o", label="measured (median)")
        top.loglog(sizes, [t * 1e3 for t in model_t], "-", label="ring model, fitted")
        top.set(xlabel="message size", ylabel="time (ms)", title="all_reduce time")
        # Log, not linear: busbw spans orders of magnitude and sits far under the memory copy.
        bottom.loglog(sizes, [pt["busbw_GBps"] for pt in sweep], "o", label="busbw, measured")
        bottom.loglog(
            sizes,
            [bus * s / t / 1e9 for s, t in zip(sizes, model_t, strict=True)],
            "-",
            label="busbw, ring model",
        )
        bottom.loglog(sizes, [pt["memcpy_GBps"] for pt in sweep], "--", label="memory copy")
        bottom.set(xlabel="message size", ylabel="GB/s", title="Bus bandwidth")
        for axis in (top, bottom):
            axis.grid(True, which="major")
            axis.legend()
            plain_log_ticks(axis, sizes[::2])
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None}, transparent=True)
        plt.close(fig)
    return buffer.getvalue()


def plain_log_ticks(axis, sizes):
    """Ticks in words ("64 KiB", "0.1"), not powers of ten: their exponents would be set in
    text 0.7 times the size of the rest, too small to read on a phone."""
    from matplotlib import ticker

    axis.set_xticks(sizes, [human_bytes(size) for size in sizes])
    axis.xaxis.set_minor_formatter(ticker.NullFormatter())
    axis.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.yaxis.set_minor_formatter(ticker.NullFormatter())


def sweep_figure_dark(result):
    return sweep_figure(result, palette="dark")


def has_memcpy_sweep(result):
    return "sweep" in result and all("memcpy_GBps" in point for point in result["sweep"])


FIGURES.append(Figure(uri=sweep_uri, applies=has_memcpy_sweep, render=sweep_figure))
FIGURES.append(Figure(uri=sweep_dark_uri, applies=has_memcpy_sweep, render=sweep_figure_dark))
