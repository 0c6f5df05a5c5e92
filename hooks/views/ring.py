"""The ring all_reduce as a step-through figure: every step of code/ddp/ring_allreduce.py's
simulation, one panel per step, with Previous/Next (assets/javascripts/stepper.js).

    <!-- lab:ring:ring -->
"""

from views.kit import ACCENT, ESC, PRIMARY, arrowhead, key, scroll_box, svg_open, text

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


VIEWS = {"ring": ring_view}
