"""Views of a lab record: the Markdown (and figures) that replace `<!-- lab:NAME:VIEW -->`.

A record is what hooks/labs.py stores for one run: the command, what it printed, its --json
result and its provenance. Every number a view shows is read from a record; none is typed here.
"""

import dataclasses
import hashlib
import io
import pathlib
import posixpath

from mkdocs.exceptions import PluginError

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
    return (
        '!!! warning "No run recorded yet"\n\n'
        f"    This lab needs hardware the site's build machine does not have, and no run of it "
        f"has been recorded yet (`{context.run.recorded.relative_to(context.root).as_posix()}` "
        "does not exist). The numbers will appear here once someone runs `nox -s record-gpu` "
        "on a GPU machine and commits the file.\n"
    )


def fence(language, body, title=None):
    attributes = f' title="{title}"' if title else ""
    return f"```{language}{attributes}\n{body.rstrip()}\n```\n"


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
    table = "\n".join(f"    | {label} | {value} |" for label, value in rows)
    return f'!!! info "Provenance: {where}"\n\n    | Fact | Value |\n    |---|---|\n{table}\n'


@view("source")
def source_view(context):
    """The script in full, then each project module it imports, folded, all downloadable."""
    script = context.run.script
    helpers = [path for path in context.run.sources if path != script]

    def relative(path):
        return path.relative_to(context.root).as_posix()

    def download(path):
        return f"[`{relative(path)}`]({context.link(relative(path))}){{: download }}"

    text = f"Download {download(script)}"
    if helpers:
        text += ", and the modules it imports, which must sit in the same folder: " + ", ".join(
            download(path) for path in helpers
        )
    text += ".\n\n" + fence("python", script.read_text(encoding="utf-8"), relative(script))
    for path in helpers:
        body = fence("python", path.read_text(encoding="utf-8"), relative(path))
        text += (
            f'\n<details class="quote" markdown="1" {NOT_SEARCHED}>\n'
            f"<summary>{relative(path)}</summary>\n\n{body}\n</details>\n"
        )
    return f'<div markdown="1" {NOT_SEARCHED}>\n\n{text}\n</div>\n'


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
        ("4 MiB memory copy (`copy_`) on the same machine", f"{memcpy['GBps']:.2f} GB/s"),
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


@view("sweep")
def sweep_view(context):
    result = context.result
    p, sweep = result["world_size"], result["sweep"]
    smallest, largest = (human_bytes(point["bytes"]) for point in (sweep[0], sweep[-1]))
    peak = max(sweep, key=lambda point: point["busbw_GBps"])
    under = all(point["busbw_GBps"] < point["memcpy_GBps"] for point in sweep)
    alt = (
        f"Two log-scale panels for a {p}-rank all_reduce from {smallest} to {largest}. Left: "
        "measured time against size, with the fitted ring model. Right: bus bandwidth, peaking "
        f"at {peak['busbw_GBps']:.2f} GB/s at {human_bytes(peak['bytes'])}, "
        f"{'below' if under else 'not always below'} the memory-copy bandwidth measured in the "
        "same run."
    )
    rows = "\n".join(
        f"    | {human_bytes(point['bytes'])} | {point['seconds'] * 1e3:.3f} | "
        f"{point['algbw_GBps']:.3f} | {point['busbw_GBps']:.3f} | {point['memcpy_GBps']:.2f} |"
        for point in sweep
    )
    fit = ring_fit(result)
    return (
        f"![{alt}]({context.link(sweep_uri(context.run.name))})\n\n"
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


def sweep_figure(result):
    """all_reduce time and bus bandwidth against size, with the fitted ring model (SVG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9})
    p, sweep, fit = result["world_size"], result["sweep"], ring_fit(result)
    sizes = [point["bytes"] for point in sweep]
    model_t = [fit["alpha_s"] + fit["slope"] * 2 * (p - 1) / p * s for s in sizes]
    bus = 2 * (p - 1) / p
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    left.loglog(sizes, [pt["seconds"] * 1e3 for pt in sweep], "o", label="measured (median)")
    left.loglog(sizes, [t * 1e3 for t in model_t], "-", label="ring model, fitted")
    left.set(xlabel="message size (bytes)", ylabel="all_reduce time (ms)", title="Time")
    right.semilogx(sizes, [pt["busbw_GBps"] for pt in sweep], "o", label="busbw, measured")
    right.semilogx(
        sizes,
        [bus * s / t / 1e9 for s, t in zip(sizes, model_t, strict=True)],
        "-",
        label="busbw, ring model",
    )
    right.semilogx(sizes, [pt["memcpy_GBps"] for pt in sweep], "--", label="memory copy (ceiling)")
    right.set(xlabel="message size (bytes)", ylabel="GB/s", title="Bus bandwidth")
    for axis in (left, right):
        axis.grid(True, which="major", alpha=0.3)
        axis.legend(fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def has_memcpy_sweep(result):
    return "sweep" in result and all("memcpy_GBps" in point for point in result["sweep"])


FIGURES.append(Figure(uri=sweep_uri, applies=has_memcpy_sweep, render=sweep_figure))
