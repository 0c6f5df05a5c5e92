"""Figure views: the ring all_reduce as a step-through figure, DDP's measured overlap, and
the kit every other figure is drawn with.

    <!-- lab:ring:ring -->          every step of code/ddp/ring_allreduce.py's simulation, one panel
                                    per step, with Previous/Next (assets/javascripts/stepper.js)
    <!-- lab:overlap:overlap -->    code/ddp/ddp_overlap.py's timeline: DDP against naive, as bars
    <!-- figure:NAME -->            a figure drawn from code alone, registered with @drawing

All draw inline SVG at build time, from a lab's record or from code. Inline, not as <img>
files, so that the drawing takes its colours from the page: the CSS in
assets/stylesheets/extra.css points the classes below at Material's palette variables, and the
figures follow the light/dark toggle. The presentation attributes are the fallback when that
stylesheet is missing. Every SVG is role="img" with a text alternative made from the same
numbers it draws.
"""

import html
import re

from lab_views import LEGIBLE_PX, PHONE_COLUMN_PX, view
from mkdocs.exceptions import PluginError

ESC = html.escape
ACCENT, PRIMARY = "#3f51b5", "#bf360c"  # fallbacks: indigo, and extra.css's deep orange


def svg_open(width, height, labelled_by, css_class, font_size):
    """The root element. Text defaults are set here once, and every <text> inherits them."""
    return (
        f'<svg class="{css_class}" viewBox="0 0 {width:g} {height:g}" width="{width:g}" '
        f'height="{height:g}" role="img" aria-labelledby="{labelled_by}" '
        f'xmlns="http://www.w3.org/2000/svg" font-size="{font_size}" text-anchor="middle" '
        'dominant-baseline="central" fill="currentColor">'
    )


def scroll_box(inner, width, font_size, label):
    """A figure drawn `width` wide with `font_size` text, never shrunk below legible.

    Past the width at which its text would fall under LEGIBLE_PX, the figure keeps that width
    and its box scrolls sideways (extra.css); the box takes keyboard focus so that it can be
    scrolled without a pointer. Only a figure too wide for a phone says so.
    """
    smallest = width * LEGIBLE_PX / font_size
    hint = "Scroll the figure sideways to see all of it."
    return (
        f'<div class="fig-scroll" style="--fig-min-width: {smallest:.0f}px" tabindex="0" '
        f'role="region" aria-label="{ESC(label)}">{inner}</div>'
        + (f'<p class="fig-scroll__hint">{hint}</p>' if smallest > PHONE_COLUMN_PX else "")
    )


def key(entries):
    """A figure's key: (swatch SVG body, words) pairs, drawn with the figure's own classes."""
    items = "".join(
        '<li><svg class="fig-key__swatch" viewBox="0 0 44 22" aria-hidden="true" '
        f'focusable="false">{swatch}</svg><span>{ESC(words)}</span></li>'
        for swatch, words in entries
    )
    return f'<ul class="fig-key">{items}</ul>'


def diagram(uid, body, *, width, height, font_size, alt, caption, key_entries=(), label):
    """A complete figure: the SVG (`body` drawn in a `width` x `height` box, its smallest text
    `font_size` units), its key, and its caption, in one <figure>.

    `alt` is the text alternative, read by a screen reader in place of the drawing: the
    figure in words, with every number it draws. `label` names the scroll box.
    """
    svg = (
        svg_open(width, height, f"{uid}-alt", "fig-diagram", font_size)
        + f'<title id="{uid}-alt">{ESC(alt)}</title>'
        + body
        + "</svg>"
    )
    return (
        f'<figure class="fig-figure" id="{uid}">'
        + scroll_box(svg, width, font_size, label)
        + (key(key_entries) if key_entries else "")
        + f"<figcaption>{ESC(caption)}</figcaption></figure>\n"
    )


# Figures drawn from code alone, by name: `<!-- figure:NAME -->` on a line of its own.
FIGURE_MARKER = re.compile(r"^<!-- figure:(?P<name>[\w-]+) -->$", re.MULTILINE)
DRAWINGS = {}


def drawing(name):
    """Register `function() -> HTML` as the figure `<!-- figure:NAME -->` shows."""

    def register(function):
        DRAWINGS[name] = function
        return function

    return register


def render_drawings(markdown, page_uri):
    def replace(match):
        if match["name"] not in DRAWINGS:
            known = sorted(DRAWINGS)
            raise PluginError(f"{page_uri}: unknown figure {match['name']!r} (known: {known})")
        return DRAWINGS[match["name"]]()

    return FIGURE_MARKER.sub(replace, markdown)


def arrowhead(marker_id):
    return (
        f'<defs><marker id="{marker_id}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        f'<path class="fig-arrowhead" d="M0,0L10,5L0,10z" fill="{ACCENT}"/></marker></defs>'
    )


# The one palette every figure's rectangles are drawn in. Per kind: the colour extra.css's
# .fig-fill--KIND gives when the stylesheet is missing, and the one fill-opacity that kind is
# drawn with, light or dark. Primary and accent at 0.4 keep the text colour on them above 4.5:1
# in both schemes (about 11:1 light, 5:1 dark; at 0.6 dark falls to 3.5:1); muted text on them
# falls under it, so none is muted. Faint is Material's lightest text colour (7 % black, 12 %
# white in dark mode), its fallback that grey on white, so it is drawn at full opacity. "none"
# is an outline only.
KINDS = {
    "primary": (PRIMARY, "0.4"),
    "accent": (ACCENT, "0.4"),
    "faint": ("#ededed", "1"),
    "none": ("none", None),
}
OUTLINE = 'stroke="currentColor" stroke-width="1"'  # every box's outline: the text colour
DASHES = ' stroke-dasharray="4 3"'  # a dashed outline: something absent, passed on or a copy


def box(x, y, w, h, kind="faint", *, dashed=False, rx=3, outlined=True):
    """A rectangle of the palette: class fig-fill--KIND, its fallback fill, its fill-opacity.

    `w` is never drawn under half a unit, so that a bar for a tiny value still shows. With
    `outlined=False` the box leaves its stroke to the `outlines()` group it is put in, which
    keeps a figure of many boxes small.
    """
    fill, opacity = KINDS[kind]
    x, y, w, h = (f"{round(v, 1):g}" for v in (x, y, max(w, 0.5), h))
    return (
        f'<rect class="fig-fill--{kind} fig-stroke" x="{x}" y="{y}" width="{w}" height="{h}"'
        + (f' rx="{rx:g}"' if rx else "")
        + f' fill="{fill}"'
        + (f' fill-opacity="{opacity}"' if opacity else "")
        + (f" {OUTLINE}" if outlined else "")
        + (DASHES if dashed else "")
        + "/>"
    )


def outlines(boxes):
    """Boxes drawn with `outlined=False`, outlined through one group."""
    return f'<g class="fig-stroke" {OUTLINE}>' + "".join(boxes) + "</g>"


def swatch(kind, dashed=False, rx=3):
    """A key's swatch: a box of `kind`, drawn as the figure draws it."""
    return box(2, 3, 40, 16, kind, dashed=dashed, rx=rx)


def text(x, y, body, anchor=None, muted=False, bold=False):
    extra = f' text-anchor="{anchor}"' if anchor else ""  # "start" or "end"; middle by default
    extra += ' class="fig-muted"' if muted else ""
    extra += ' font-weight="700"' if bold else ""
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{ESC(body)}</text>'


# ---------------------------------------------------------------------------------------------
# The ring all_reduce, one panel per step
# ---------------------------------------------------------------------------------------------
# Sized so that four ranks fit a phone's column (358 px) with their 14-unit text at 10 px.
CELL_W, CELL_H, GAP_X, GAP_Y, LEFT, TOP = 92, 32, 16, 22, 64, 28
RING_FONT = 14


def carried(ranks, p):
    """A chunk's label: whose numbers it holds ("r0+r1+r3"), shortened past four ranks."""
    if len(ranks) <= 4:
        return "+".join(f"r{r}" for r in ranks)
    return f"all {p} ranks" if len(ranks) == p else f"{len(ranks)} of {p} ranks"


def ring_caption(result, frame):
    """What a panel shows, in words: its caption and the SVG's text alternative."""
    p, steps = result["ranks"], 2 * (result["ranks"] - 1)
    if frame["phase"] == "start":
        return (
            f"Start: each of the {p} ranks holds its own {result['elements']} integers, cut into "
            f"{p} chunks of {result['chunk_elements']}; every copy of a chunk carries one rank's "
            "numbers. Rows are ranks, columns are chunks; a cell names the ranks whose numbers "
            "that copy holds."
        )
    sends = "; ".join(
        f"rank {s['src']} sends c{s['chunk']} ({carried(s['carries'], p)}) to rank {s['dst']}"
        for s in frame["sends"]
    )
    if frame["phase"] == "reduce-scatter":
        words = (
            f"Step {frame['step']} of {steps}, reduce-scatter {frame['step']} of {p - 1}: {sends}. "
            "Each receiver adds the chunk into its own copy."
        )
        if frame["step"] == p - 1:
            owners = ", ".join(f"rank {r} c{(r + 1) % p}" for r in range(p))
            words += f" Every rank now holds one complete chunk: {owners}."
    else:
        gather = frame["step"] - (p - 1)
        words = (
            f"Step {frame['step']} of {steps}, all-gather {gather} of {p - 1}: {sends}. "
            "Each receiver overwrites its copy with the complete chunk."
        )
        if frame["step"] == steps:
            words += f" Every rank now holds all {p} complete chunks."
    return words + f" Each rank has sent {frame['bytes_sent'][0]} B so far."


def ring_width(p):
    return LEFT + p * (CELL_W + GAP_X)


def ring_panel(result, frame, uid):
    p = result["ranks"]
    width = ring_width(p)
    height = TOP + p * CELL_H + (p - 1) * GAP_Y + 6
    senders = {(s["src"], s["chunk"]) for s in frame["sends"]}
    receivers = {(s["dst"], s["chunk"]) for s in frame["sends"]}
    parts = [
        svg_open(width, height, f"{uid}-caption", "fig-ring", RING_FONT),
        arrowhead(f"{uid}-arrow"),
    ]

    def x_of(chunk):
        return LEFT + chunk * (CELL_W + GAP_X)

    def y_of(rank):
        return TOP + rank * (CELL_H + GAP_Y)

    for j in range(p):
        parts.append(text(x_of(j) + CELL_W / 2, TOP / 2, f"chunk {j}", muted=True))
    cells, labels = [], []
    for rank, row in enumerate(frame["holdings"]):
        labels.append(text(6, y_of(rank) + CELL_H / 2, f"rank {rank}", anchor="start"))
        for j, ranks in enumerate(row):
            done, got = len(ranks) == p, (rank, j) in receivers
            sent = (rank, j) in senders and not got
            cells.append(ring_cell(x_of(j), y_of(rank), CELL_W, CELL_H, len(ranks), p, got, sent))
            labels.append(
                text(x_of(j) + CELL_W / 2, y_of(rank) + CELL_H / 2, carried(ranks, p), bold=done)
            )
    # Cells share their fill, outline and corners through the group they sit in.
    parts.append(
        f'<g class="fig-ring-cells" fill="{ACCENT}" stroke="currentColor" stroke-width="1">'
        + "".join(cells)
        + "</g>"
    )
    parts += labels
    arrows = []
    for send in frame["sends"]:
        x, src, dst = x_of(send["chunk"]), send["src"], send["dst"]
        if dst == src + 1:  # straight down to the next row
            cx = x + CELL_W / 2
            arrows.append(f'<path d="M{cx:g},{y_of(src) + CELL_H + 1}V{y_of(dst) - 2}"/>')
        else:  # the ring closes: from the last rank back up to rank 0, in the gap to the right
            right = x + CELL_W
            arrows.append(
                f'<path d="M{right},{y_of(src) + CELL_H / 2:g}H{right + GAP_X / 2:g}'
                f'V{y_of(dst) + CELL_H / 2:g}H{right + 2}"/>'
            )
    parts.append(
        f'<g class="fig-arrow" fill="none" stroke="{ACCENT}" stroke-width="1.6" '
        f'marker-end="url(#{uid}-arrow)">' + "".join(arrows) + "</g></svg>"
    )
    return "".join(parts)


def ring_cell(x, y, width, height, summed, p, got, sent):
    """One copy of a chunk holding `summed` of `p` ranks' numbers.

    Its fill deepens with every rank added and turns to the primary colour once complete; a
    thick outline marks a copy this step changed, a dashed one a copy this step passed on.
    """
    done = summed == p
    classes = [name for name, on in (("done", done), ("got", got), ("sent", sent)) if on]
    look = f' class="{" ".join(classes)}"' if classes else ""
    look += ' stroke-width="2.5"' if got else ' stroke-dasharray="4 3"' if sent else ""
    opacity = 0.45 if done else 0.08 + 0.3 * (summed - 1) / max(p - 1, 1)
    colour = f' fill="{PRIMARY}"' if done else ""
    return (
        f'<rect x="{x}" y="{y}" width="{width}" height="{height}" rx="4" '
        f'fill-opacity="{opacity:.2f}"{colour}{look}/>'
    )


def ring_key(p):
    """What fills, outlines and arrows mean, drawn with the panels' own cells."""

    def cells(*rects):
        return (
            f'<g class="fig-ring-cells" fill="{ACCENT}" stroke="currentColor" stroke-width="1">'
            + "".join(rects)
            + "</g>"
        )

    def cell(summed, got=False, sent=False):
        return cells(ring_cell(2, 2, 40, 18, summed, p, got, sent))

    arrow = (
        f'<g class="fig-arrow" fill="none" stroke="{ACCENT}" stroke-width="1.6">'
        '<path d="M4,11H36"/><path class="fig-arrowhead" d="M34,6L42,11L34,16z" '
        f'fill="{ACCENT}" stroke="none"/></g>'
    )
    return key(
        [
            (cell(1), "one rank's numbers; a deeper blue holds more ranks' sum"),
            (cell(p), f"the complete sum of all {p} ranks"),
            (cell(2, sent=True), "dashed outline: sent on in this step"),
            (cell(2, got=True), "thick outline: received in this step"),
            (arrow, "a send, from a rank to the next one around the ring"),
        ]
    )


@view("ring")
def ring_view(context):
    """The stepper: every panel in order; stepper.js shows one at a time when it runs."""
    result = context.result
    uid = f"fig-{context.run.name}"
    frames = result["frames"]
    panels = []
    for index, frame in enumerate(frames):
        panel_id = f"{uid}-{index}"
        drawing = ring_panel(result, frame, panel_id)
        box = scroll_box(drawing, ring_width(result["ranks"]), RING_FONT, f"Ring panel {index}")
        panels.append(
            f'<figure class="fig-stepper__panel" id="{panel_id}">{box}'
            f'<figcaption id="{panel_id}-caption">{ESC(ring_caption(result, frame))}</figcaption>'
            "</figure>"
        )
    stepper = (
        '<div class="fig-stepper" data-stepper role="group" '
        'aria-label="Ring all_reduce, step by step">\n'
        '<div class="fig-stepper__controls" hidden>'
        '<button type="button" class="md-button" data-stepper-prev>Previous</button>'
        '<span class="fig-stepper__status" aria-live="polite"></span>'
        '<button type="button" class="md-button md-button--primary" data-stepper-next>'
        "Next</button></div>\n"
        + ring_key(result["ranks"])
        + "\n"
        + "\n".join(panels)
        + "\n</div>\n"
    )
    return stepper + "\n" + ring_summary(result) + "\n"


def ring_summary(result):
    p, size = result["ranks"], result["tensor_bytes"]
    formula = result["ring_formula_bytes"]
    per_rank = set(result["bytes_sent"])
    sent = f"{per_rank.pop()} B" if len(per_rank) == 1 else "different amounts"
    exact = formula["numerator"] / formula["denominator"]
    words = (
        f"With \\(p = {p}\\) and \\(S = {size}\\) B, each rank sent {sent}; "
        f"\\(2(p-1)S/p = {exact:g}\\) B. "
    )
    real = result.get("real")
    if real is None:
        return words + "This run did not compare the simulation with torch."
    checks = result["checks"]
    same = checks["real_all_reduce_equals_simulation"]
    shards = checks["real_reduce_scatter_equals_simulation"]
    return words + (
        "The same build ran torch's `all_reduce` and `reduce_scatter` with gloo on "
        f"{real['world_size']} processes, on the same integers: every rank's `all_reduce` result "
        f"{'equals' if same else '**differs from**'} the simulation's, element for element, and "
        f"the chunk `reduce_scatter` gave rank \\(j\\) "
        f"{'equals' if shards else '**differs from**'} the simulation's complete chunk \\(j\\) "
        f"(held by rank \\(j-1\\) in this schedule)."
    )


# ---------------------------------------------------------------------------------------------
# DDP's overlap, measured: a timeline of one backward pass
# ---------------------------------------------------------------------------------------------
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


@view("overlap")
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
