"""Views of the DDP labs (code/ddp/gloo.py on CPUs, code/ddp/nccl.py on GPUs): their
results tables and the all_reduce sweep, drawn with matplotlib as an SVG file per palette.

    <!-- lab:gloo:results -->        the checks and the 4 MiB all_reduce, as a table
    <!-- lab:gloo:sweep -->          the sweep figure, the ring model fitted to it, its points
    <!-- lab:nccl:nccl-results -->   the same table, then the sweep in two dtypes and a DDP step
"""

import io

from views.common import LEGIBLE_PX, Figure, machine

VARIANT_LABELS = {
    "naive": "Naive DDP (broadcast, then all_reduce and divide)",
    "ddp": "DistributedDataParallel",
    "ddp_no_sync": "DistributedDataParallel with `no_sync` (2 micro-batches)",
}


def number(value):
    return f"{value:.2e}" if value != 0 else "0"


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


# The sweep figure's size in points (the SVG's user units) and its smallest text: drawn this
# size, it fits a phone's 358 px column with that text at LEGIBLE_PX or more.
SWEEP_SIZE_IN, SWEEP_SMALLEST_PT = (4.8, 6.6), 11


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


VIEWS = {"results": results_view, "sweep": sweep_view, "nccl-results": nccl_results_view}
FIGURES = [
    Figure(uri=sweep_uri, applies=has_memcpy_sweep, render=sweep_figure),
    Figure(uri=sweep_dark_uri, applies=has_memcpy_sweep, render=sweep_figure_dark),
]
