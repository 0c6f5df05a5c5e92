"""DDP's overlap, measured: code/ddp/ddp_overlap.py's timeline of one backward pass, DDP against
the naive loop, as bars.

    <!-- lab:overlap:overlap -->
"""

from views.kit import ACCENT, ESC, PRIMARY, key, scroll_box, svg_open, text


def plural(count, noun):
    return f"{count} {noun}" + ("" if count == 1 else "s")


def layer_segments(run, parameters):
    """(layer, start, end) for each layer: from the previous layer's gradients to its own."""
    ready = {}
    for param in parameters:
        at = run["ready"][param["name"]]
        ready[param["layer"]] = max(ready.get(param["layer"], 0.0), at)
    segments, previous = [], 0.0
    for layer, at in sorted(ready.items(), key=lambda item: item[1]):
        segments.append((layer, previous, at))
        previous = at
    return segments


def comm_intervals(run):
    if "buckets" in run:
        return [(b["launch_s"], b["done_s"]) for b in run["buckets"]]
    return [(c["launch_s"], c["done_s"]) for c in run["allreduces"]]


def covered(intervals, until=float("inf")):
    """Seconds during which at least one interval is in flight, counting only up to `until`."""
    total, reach = 0.0, 0.0
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, until)
        if end > start:
            total += end - start
        reach = max(reach, end)
    return total


def tick_step(span):
    """A round tick spacing (1, 2 or 5 times a power of ten) giving five to ten ticks."""
    step = 10.0 ** int(f"{span:e}".split("e")[1])
    for factor in (0.1, 0.2, 0.5, 1, 2, 5):
        if span / (step * factor) <= 10:
            return step * factor
    return step * 10


TIMELINE_FONT = 12


def bar_labels(segments, x, y):
    """L0, L1, ... on each backward bar: inside a bar wide enough, else beside or above it.

    The last bar has free room to its right (the step's communication is on the row below);
    a narrow bar in the middle gets its label above the row.
    """
    labels = []
    for index, (layer, start, end) in enumerate(segments):
        middle, last = (x(start) + x(end)) / 2, index == len(segments) - 1
        if x(end) - x(start) >= 18:  # "L5" is about 14 units wide
            labels.append(text(middle, y + 9, f"L{layer}"))
        elif last:
            labels.append(text(x(end) + 3, y + 9, f"L{layer}", anchor="start"))
        else:
            labels.append(text(middle, y - 6, f"L{layer}"))
    return labels


def overlap_figure(result, uid):
    ddp = result["ddp"]["runs"][result["ddp"]["shown"]]
    naive = result["naive"]["runs"][result["naive"]["shown"]]
    width, left, right = 760, 178, 14
    span_ms = max(ddp["step_s"], naive["step_s"]) * 1e3 * 1.04
    scale = (width - left - right) / span_ms

    def x(seconds):
        return left + seconds * 1e3 * scale

    parts, y = [], 14
    for name, run in (("DDP", ddp), ("naive", naive)):
        top = y
        parts.append(text(6, y + 9, f"{name}: backward", anchor="start"))
        segments = layer_segments(run, result["parameters"])
        for _, start, end in segments:
            parts.append(
                f'<rect class="fig-bar fig-bar--compute" x="{x(start):.1f}" y="{y}" '
                f'width="{max(x(end) - x(start), 1):.1f}" height="18" fill="{PRIMARY}" '
                'fill-opacity="0.55" stroke="currentColor" stroke-width="0.5"/>'
            )
        parts += bar_labels(segments, x, y)
        y += 24
        intervals = comm_intervals(run)
        if name == "DDP":
            label, row_h = f"DDP: all_reduce, {len(intervals)} buckets", 10
            rows = len(intervals)
        else:
            label, row_h, rows = f"naive: {len(intervals)} all_reduces", 18, 1
        parts.append(text(6, y + rows * row_h / 2, label, anchor="start"))
        for i, (start, end) in enumerate(intervals):
            row_y = y + (i if rows > 1 else 0) * row_h
            shade = "0.75" if i % 2 == 0 or rows > 1 else "0.45"
            parts.append(
                f'<rect class="fig-bar fig-bar--comm" x="{x(start):.1f}" y="{row_y + 1}" '
                f'width="{max(x(end) - x(start), 1):.1f}" height="{row_h - 2}" fill="{ACCENT}" '
                f'fill-opacity="{shade}" stroke="currentColor" stroke-width="0.5"/>'
            )
        y += rows * row_h + 4
        end_x = x(run["step_s"])
        parts.append(
            f'<path class="fig-rule" d="M{end_x:.1f},{top - 4}V{y}" stroke="currentColor" '
            'stroke-width="1.2" stroke-dasharray="3 2" fill="none"/>'
        )
        parts.append(
            text(
                end_x - 4,
                y + 8,
                f"{'backward() returned' if name == 'DDP' else 'last all_reduce done'} "
                f"{run['step_s'] * 1e3:.1f} ms",
                anchor="end",
                muted=True,
            )
        )
        y += 32
    axis_y = y
    parts.append(
        f'<path class="fig-axis" d="M{left},{axis_y}H{width - right}" stroke="currentColor" '
        'stroke-width="1" fill="none"/>'
    )
    step = tick_step(span_ms)
    tick = 0.0
    while tick <= span_ms:
        tx = left + tick * scale
        parts.append(
            f'<path class="fig-axis" d="M{tx:.1f},{axis_y}v5" stroke="currentColor" fill="none"/>'
        )
        parts.append(text(tx, axis_y + 14, f"{tick:g}", muted=True))
        tick += step
    parts.append(
        text(
            (left + width - right) / 2,
            axis_y + 32,
            "milliseconds since backward() was called (rank 0)",
            muted=True,
        )
    )
    height = axis_y + 42
    drawing = (
        svg_open(width, height, f"{uid}-alt", "fig-timeline", TIMELINE_FONT)
        + f'<title id="{uid}-alt">{ESC(overlap_alt(result, ddp, naive))}</title>'
        + "".join(parts)
        + "</svg>"
    )
    return scroll_box(drawing, width, TIMELINE_FONT, "DDP overlap timeline") + overlap_key()


def overlap_key():
    """What the bars and rules mean, drawn with the timeline's own classes."""
    bar = (
        '<rect class="fig-bar fig-bar--{kind}" x="2" y="4" width="40" height="14" '
        'fill="{fill}" fill-opacity="{opacity}" stroke="currentColor" stroke-width="0.5"/>'
    )
    rule = (
        '<path class="fig-rule" d="M22,1V21" stroke="currentColor" stroke-width="1.2" '
        'stroke-dasharray="3 2" fill="none"/>'
    )
    return key(
        [
            (
                bar.format(kind="compute", fill=PRIMARY, opacity="0.55"),
                "backward computing layer Lk's gradients",
            ),
            (
                bar.format(kind="comm", fill=ACCENT, opacity="0.75"),
                "an all_reduce in flight (DDP: one row per bucket)",
            ),
            (rule, "the step ends: backward() returns, or the last all_reduce finishes"),
        ]
    )


def overlap_alt(result, ddp, naive):
    """The figure in words, every number read from the run."""
    p, layers = result["world_size"], result["layers"]
    ddp_last = max(ddp["ready"].values())
    naive_last = max(naive["ready"].values())
    buckets = ddp["buckets"]
    return (
        f"Measured timeline of one backward pass on rank 0 of {p} (gloo on CPU, {layers} "
        f"Linear layers; of {result['iterations']} timed iterations, the one with the median "
        "step time). DDP: the layers' "
        f"gradients were ready from {min(ddp['ready'].values()) * 1e3:.1f} to "
        f"{ddp_last * 1e3:.1f} ms; its {len(buckets)} bucket all_reduces were launched from "
        f"{buckets[0]['launch_s'] * 1e3:.1f} ms on, while backward was still running, the last "
        f"finished at {max(b['done_s'] for b in buckets) * 1e3:.1f} ms, and backward() returned "
        f"at {ddp['step_s'] * 1e3:.1f} ms. Naive: backward finished at "
        f"{naive_last * 1e3:.1f} ms, then {len(naive['allreduces'])} all_reduces ran one after "
        f"another until {naive['step_s'] * 1e3:.1f} ms."
    )


def earlier_or_later(seconds):
    """'4.2 ms earlier' for a negative difference, '4.2 ms later' for a positive one."""
    return f"{abs(seconds) * 1e3:.1f} ms {'later' if seconds > 0 else 'earlier'}"


def overlap_verdict(result):
    """Where the ranks ran, and how DDP's backward and step compare with the naive loop's.

    Every word that compares is chosen by the numbers, so the sentence stays true whichever
    way a run on a busy machine comes out.
    """
    ddp = result["ddp"]["runs"][result["ddp"]["shown"]]
    naive = result["naive"]["runs"][result["naive"]["shown"]]
    cores = result.get("cores") or {}
    where = (
        "Each rank ran pinned to one CPU core of its own"
        if cores.get("pinned")
        else "The ranks ran on CPU cores the operating system chose"
    )
    backward = max(ddp["ready"].values()) - max(naive["ready"].values())
    step = ddp["step_s"] - naive["step_s"]
    return (
        f"{where} ({plural(cores.get('available', 0), 'core')} available). DDP's backward "
        f"reached its last gradient {earlier_or_later(backward)} than the naive loop's, and "
        f"its step ended {earlier_or_later(step)}."
    )


def overlap_view(context):
    result = context.result
    uid = f"fig-{context.run.name}"
    ddp = result["ddp"]["runs"][result["ddp"]["shown"]]
    naive = result["naive"]["runs"][result["naive"]["shown"]]
    last_ready = max(ddp["ready"].values())
    in_flight = covered(comm_intervals(ddp))
    hidden = covered(comm_intervals(ddp), until=last_ready)
    naive_comm = naive["step_s"] - naive["allreduces"][0]["launch_s"]
    caption = (
        f"One measured iteration on rank 0 of {result['world_size']}: DDP launches a "
        "bucket's all_reduce as soon as the bucket's gradients are ready, while backward goes "
        "on with earlier layers; the naive loop starts its all_reduces once backward returns."
    )
    figure = (
        f'<figure class="fig-overlap">{overlap_figure(result, uid)}'
        f"<figcaption>{ESC(caption)}</figcaption></figure>\n"
    )
    summary = (
        f"In the iteration drawn, DDP had an all_reduce in flight for {in_flight * 1e3:.1f} ms, "
        f"{100 * hidden / in_flight:.0f} % of it before the last gradient was ready, and its "
        f"step (backward plus gradient sync) took {ddp['step_s'] * 1e3:.1f} ms. The naive loop "
        f"spent {naive_comm * 1e3:.1f} ms in its {len(naive['allreduces'])} all_reduces after "
        f"backward, for a step of {naive['step_s'] * 1e3:.1f} ms. On its first iteration DDP "
        f"used {plural(result['first_iteration_buckets'], 'bucket')}; the buckets drawn are "
        "the ones it rebuilt from the gradient order it observed. " + overlap_verdict(result)
    )
    rows = "\n".join(
        f"    | {b['index']} | {', '.join(f'`{name}`' for name in b['params'])} | "
        f"{b['bytes'] / 2**20:.2f} | {b['launch_s'] * 1e3:.1f} | {b['done_s'] * 1e3:.1f} |"
        for b in ddp["buckets"]
    )
    table = (
        '??? abstract "The measured buckets"\n\n'
        "    | Bucket | Parameters | MiB | Launched (ms) | Done (ms) |\n"
        "    |---:|---|---:|---:|---:|\n"
        f"{rows}\n\n"
        "    Parameters are named as in the `nn.Sequential`: `2k.weight` and `2k.bias` belong "
        "to the Linear layer drawn as Lk. "
        f"Times are on rank 0's clock, from the call to `backward()`; world size "
        f"{result['world_size']}, `bucket_cap_mb={result['bucket_cap_mb']:g}`, batch "
        f"{result['batch']} per rank, {result['warmup']} warm-up iterations.\n"
    )
    return figure + "\n" + summary + "\n\n" + table


VIEWS = {"overlap": overlap_view}
