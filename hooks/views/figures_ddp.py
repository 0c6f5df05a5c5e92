"""The figures of chapters 2 to 4, drawn at build time with the figure kit (views/kit.py).

    <!-- lab:ring:collectives -->       chapter 2: what every collective of the table leaves on
                                        each of 4 ranks, before and after, from the values
                                        code/ddp/ring_allreduce.py's gloo processes really held
    <!-- lab:overlap:buckets -->        chapter 3: the parameters in registration order, the
                                        order their gradients became ready on the first
                                        backward, and DDP's buckets before and after the
                                        rebuild, from code/ddp/ddp_overlap.py's record
    <!-- figure:sampler-split -->       chapter 4: DistributedSampler's split of 10 indices over
                                        3 ranks, padded and with drop_last=True, worked out here

Each is drawn tall rather than wide, so that its smallest text stays legible on a phone
(common.LEGIBLE_PX at common.PHONE_COLUMN_PX). The sampler's split is computed in
plain Python, without importing torch (slow to import in a build hook);
site_tests/labs/test_figures_ddp.py checks it against torch's own DistributedSampler.
"""

from views.kit import box, diagram, swatch, text

FONT = 14  # the smallest text of every figure here: width <= 32.5 * 14 = 455 fits a phone


def numbers(values):
    return ", ".join(str(v) for v in values)


# ---------------------------------------------------------------------------------------------
# Chapter 2: what each collective leaves on every rank (code/ddp/ring_allreduce.py's tour)
# ---------------------------------------------------------------------------------------------
SLOT_W, SLOT_H, RANK_GAP, LABEL_W = 21, 22, 12, 56
MISSING = {  # what a rank without a tensor shows, by call and side
    ("reduce", "after"): "undefined",
    ("gather", "after"): "none",
    ("scatter", "before"): "none",
}
SIDE_WORDS = {"before": "passes", "after": "holds"}


def root_words(call, root):
    if root is None:
        return ""
    return f", {'from' if call in ('broadcast', 'scatter') else 'to'} rank {root}"


def slot_kind(value, rank, before):
    """Whose number a slot holds: this rank's own, another rank's (copied), or a sum."""
    owners = [q for q, row in enumerate(before) if row is not None and value in row]
    if not owners:
        return "primary"  # in no rank's input: a sum over ranks
    return "faint" if rank in owners else "accent"


def tour_holding(call, side, held):
    """One rank's tensor in words: every chunk, one chunk, or none."""
    if held is None:
        return MISSING[(call, side)]
    kept = [(j, v) for j, v in enumerate(held) if v is not None]
    if len(kept) == len(held):
        return numbers(held)
    return "; ".join(f"chunk {j} only: {v}" for j, v in kept)


def collectives_alt(tour, p):
    rows = []
    for call, entry in tour.items():
        before, after = (
            "; ".join(
                f"rank {r} {tour_holding(call, side, held)}" for r, held in enumerate(entry[side])
            )
            for side in ("before", "after")
        )
        rows.append(f"{call}{root_words(call, entry['root'])}. Before: {before}. After: {after}.")
    return (
        f"What each collective leaves on {p} ranks, as gloo ran them in this build; a rank's "
        f"buffer is {p} chunks, and chunk j of rank r starts as 10 r + j. " + " ".join(rows)
    )


def collectives_figure(tour, p, uid):
    column_w = p * SLOT_W
    width = LABEL_W + p * column_w + (p - 1) * RANK_GAP + 4
    parts, y = [], 4

    def x_of(rank):
        return LABEL_W + rank * (column_w + RANK_GAP)

    for rank in range(p):
        parts.append(text(x_of(rank) + column_w / 2, y + 9, f"rank {rank}", bold=True))
    y += 26
    for call, entry in tour.items():
        parts.append(
            f'<path class="fig-stroke" d="M0,{y - 4}H{width}" stroke="currentColor" '
            'stroke-width="0.5" stroke-opacity="0.4" fill="none"/>'
        )
        parts.append(text(0, y + 10, call, anchor="start", bold=True))
        words = root_words(call, entry["root"]).lstrip(", ")
        if words:
            parts.append(text(8 * len(call) + 14, y + 10, words, anchor="start", muted=True))
        y += 24
        for side in ("before", "after"):
            parts.append(text(0, y + SLOT_H / 2, side, anchor="start", muted=True))
            for rank, held in enumerate(entry[side]):
                left = x_of(rank)
                if held is None:
                    parts.append(
                        text(left + column_w / 2, y + SLOT_H / 2, MISSING[(call, side)], muted=True)
                    )
                    continue
                for j, value in enumerate(held):
                    x = left + j * SLOT_W
                    if value is None:  # not part of this rank's tensor
                        parts.append(box(x + 1, y + 1, SLOT_W - 2, SLOT_H - 2, "none", dashed=True))
                        continue
                    kind = slot_kind(value, rank, entry["before"])
                    parts.append(box(x + 0.5, y, SLOT_W - 1, SLOT_H, kind))
                    parts.append(text(x + SLOT_W / 2, y + SLOT_H / 2, str(value)))
            y += SLOT_H + 4
        y += 12
    return diagram(
        uid,
        "".join(parts),
        width=width,
        height=y - 8,
        font_size=FONT,
        alt=collectives_alt(tour, p),
        caption=(
            f"Every collective of the table, run by {p} gloo processes in this build: each "
            "row shows what the ranks passed in and what they held afterwards. A rank's buffer "
            f"is drawn as {p} slots, one per chunk; a tensor of one chunk sits in its chunk's "
            "slot. Orange slots are sums over ranks, blue ones were copied from another rank."
        ),
        key_entries=(
            (swatch("faint"), "a number this rank passed in itself"),
            (swatch("accent"), "a number copied from another rank"),
            (swatch("primary"), "a sum over every rank"),
            (swatch("none", dashed=True), "a chunk that is not in this rank's tensor"),
        ),
        label="What each collective leaves on every rank",
    )


def collectives_view(context):
    real = context.result["real"]
    if real is None:
        return "This run skipped the real processes (--no-real): there is nothing to draw.\n"
    return collectives_figure(real["tour"], real["world_size"], f"fig-{context.run.name}-tour")


# ---------------------------------------------------------------------------------------------
# Chapter 3: DDP's buckets, before and after the rebuild (code/ddp/ddp_overlap.py)
# ---------------------------------------------------------------------------------------------
ROW_H, NAME_W, READY_W, BUCKET_W, COL_GAP = 26, 84, 70, 124, 14


def bucket_of(buckets):
    """Parameter name -> (bucket index, the bucket), for one iteration's buckets."""
    return {name: (b["index"], b) for b in buckets for name in b["params"]}


def ready_order(run):
    """Parameter name -> 1 for the first gradient ready, 2 for the next, ..."""
    ranked = sorted(run["ready"], key=run["ready"].get)
    return {name: place for place, name in enumerate(ranked, start=1)}


def runs_of(rows, of):
    """Consecutive rows that share a bucket: [(bucket index, first row, last row)]."""
    runs = []
    for row, name in enumerate(rows):
        index = of[name][0]
        if runs and runs[-1][0] == index and runs[-1][2] == row - 1:
            runs[-1][2] = row
        else:
            runs.append([index, row, row])
    return [tuple(run) for run in runs]


def mib(nbytes):
    return f"{nbytes / 2**20:.2f} MiB"


def buckets_alt(result, names, first, later):
    order = ready_order(result["first_iteration"])
    ready = ", ".join(sorted(names, key=order.get))

    def described(buckets):
        return "; ".join(
            f"bucket {b['index']} ({mib(b['bytes'])}): {', '.join(b['params'])}" for b in buckets
        )

    return (
        f"DDP's buckets for {len(names)} parameters of {result['layers']} Linear layers "
        f"(bucket_cap_mb={result['bucket_cap_mb']:g}, rank 0 of {result['world_size']}). "
        f"Registration order: {', '.join(names)}. On the first backward the gradients became "
        f"ready in this order: {ready}. Iteration 1 used {len(first)} "
        f"bucket{'s' if len(first) != 1 else ''}: {described(first)}. From iteration 2 on, "
        f"after the rebuild, {len(later)} buckets, launched in index order: {described(later)}."
    )


def buckets_figure(result, uid):
    names = [param["name"] for param in result["parameters"]]
    first = sorted(result["first_iteration"]["buckets"], key=lambda b: b["index"])
    later_run = result["ddp"]["runs"][result["ddp"]["shown"]]
    later = sorted(later_run["buckets"], key=lambda b: b["index"])
    order = ready_order(result["first_iteration"])
    x_ready = NAME_W + COL_GAP
    x_first = x_ready + READY_W + COL_GAP
    x_later = x_first + BUCKET_W + COL_GAP
    width = x_later + BUCKET_W + 2
    top = 48
    parts = [
        text(0, 10, "parameter", anchor="start", bold=True),
        text(0, 30, "(registered)", anchor="start", muted=True),
        text(x_ready + READY_W / 2, 10, "ready", bold=True),
        text(x_ready + READY_W / 2, 30, "(iter. 1)", muted=True),
        text(x_first + BUCKET_W / 2, 10, "iteration 1", bold=True),
        text(x_first + BUCKET_W / 2, 30, "buckets", muted=True),
        text(x_later + BUCKET_W / 2, 10, "iteration 2 on", bold=True),
        text(x_later + BUCKET_W / 2, 30, "rebuilt buckets", muted=True),
    ]
    for row, name in enumerate(names):
        y = top + row * ROW_H
        parts.append(text(0, y + ROW_H / 2, name, anchor="start"))
        parts.append(box(x_ready + 12, y + 2, READY_W - 24, ROW_H - 4, "accent"))
        parts.append(text(x_ready + READY_W / 2, y + ROW_H / 2, ordinal(order[name])))
    for x, buckets, kind in ((x_first, first, "faint"), (x_later, later, "primary")):
        of = bucket_of(buckets)
        for index, start, end in runs_of(names, of):
            y, h = top + start * ROW_H + 2, (end - start + 1) * ROW_H - 4
            parts.append(box(x, y, BUCKET_W, h, kind))
            middle = y + h / 2
            nbytes = of[names[start]][1]["bytes"]
            if h >= 2 * ROW_H - 4:
                parts.append(text(x + BUCKET_W / 2, middle - 9, f"bucket {index}", bold=True))
                parts.append(text(x + BUCKET_W / 2, middle + 9, mib(nbytes)))
            else:
                parts.append(text(x + BUCKET_W / 2, middle, f"bucket {index}", bold=True))
    height = top + len(names) * ROW_H + 4
    return diagram(
        uid,
        "".join(parts),
        width=width,
        height=height,
        font_size=FONT,
        alt=buckets_alt(result, names, first, later),
        caption=(
            "Rows are the parameters in registration order (model.parameters()). On the first "
            "backward the last layer's gradients were ready first; after it, DDP rebuilt its "
            "buckets in that observed order, so bucket 0, the first all-reduce launched, holds "
            "the last layer. Drawn from the overlap lab's record in this build."
        ),
        key_entries=(
            (swatch("accent"), "when the gradient became ready on the first backward"),
            (swatch("faint"), "a bucket of iteration 1, before the rebuild"),
            (swatch("primary"), "a bucket after the rebuild, launched in index order"),
        ),
        label="DDP's buckets before and after the rebuild",
    )


def ordinal(n):
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def buckets_view(context):
    return buckets_figure(context.result, f"fig-{context.run.name}-buckets")


# ---------------------------------------------------------------------------------------------
# Chapter 4: how DistributedSampler splits indices (shuffle off)
# ---------------------------------------------------------------------------------------------
SAMPLES, RANKS = 10, 3  # chapter 4's block: 10 examples, 3 ranks
CELL, CELL_GAP, RANK_LABEL_W = 28, 4, 64


def sampler_split(n, p, drop_last):
    """What DistributedSampler(range(n), p, r, shuffle=False, drop_last=...) gives each rank r,
    and the index list it deals from: (slots, per_rank, dropped). A slot is (index, padded).

    drop_last=False pads the list to a multiple of p with its own first indices, repeated;
    drop_last=True cuts it down to a multiple of p. Rank r then takes slots r, r + p, ...
    """
    order = list(range(n))
    if drop_last:
        total = (n // p) * p
        slots, dropped = [(i, False) for i in order[:total]], order[total:]
    else:
        total = -(-n // p) * p  # ceil(n / p) per rank
        pad = total - n
        padding = (order * (pad // n + 1))[:pad]  # wraps round if p > n
        slots, dropped = [(i, False) for i in order] + [(i, True) for i in padding], []
    per_rank = [slots[r::p] for r in range(p)]
    return slots, per_rank, dropped


def sampler_panel(n, p, drop_last, y):
    slots, per_rank, dropped = sampler_split(n, p, drop_last)
    parts = [text(0, y + 10, f"drop_last={drop_last}", anchor="start", bold=True)]
    note = (
        f"{len(dropped)} dropped" if drop_last else f"{len(slots) - n} padded"
    ) + f", {len(per_rank[0])} per rank"
    parts.append(text(0, y + 30, note, anchor="start", muted=True))
    y += 44
    parts.append(text(0, y + CELL / 2, "list", anchor="start", muted=True))
    cells = slots + [(i, None) for i in dropped]
    for k, (index, padded) in enumerate(cells):
        x = RANK_LABEL_W + k * (CELL + CELL_GAP)
        if padded is None:  # dropped: never dealt
            parts.append(box(x, y, CELL, CELL, "none", dashed=True))
            parts.append(text(x + CELL / 2, y + CELL / 2, str(index), muted=True))
            continue
        parts.append(box(x, y, CELL, CELL, "primary" if padded else "faint"))
        parts.append(text(x + CELL / 2, y + CELL / 2, str(index)))
        parts.append(text(x + CELL / 2, y + CELL + 12, f"r{k % p}", muted=True))
    y += CELL + 30
    for rank, taken in enumerate(per_rank):
        parts.append(text(0, y + CELL / 2, f"rank {rank}", anchor="start"))
        for k, (index, padded) in enumerate(taken):
            x = RANK_LABEL_W + k * (CELL + CELL_GAP)
            parts.append(box(x, y, CELL, CELL, "primary" if padded else "faint"))
            parts.append(text(x + CELL / 2, y + CELL / 2, str(index)))
        y += CELL + 6
    return parts, y


def sampler_alt(n, p):
    words = []
    for drop_last in (False, True):
        slots, per_rank, dropped = sampler_split(n, p, drop_last)
        ranks = "; ".join(
            f"rank {r} takes {numbers(i for i, _ in taken)}" for r, taken in enumerate(per_rank)
        )
        if drop_last:
            change = f"the list is cut to {len(slots)}, dropping {numbers(dropped)}"
        else:
            pads = [i for i, padded in slots if padded]
            change = f"the list is padded to {len(slots)} by repeating {numbers(pads)}"
        words.append(f"With drop_last={drop_last}, {change}; {ranks}.")
    return (
        f"DistributedSampler over {n} indices on {p} ranks, shuffle off: rank r takes the "
        f"indices at positions r, r + {p}, and so on. " + " ".join(words)
    )


def sampler_figure(n=SAMPLES, p=RANKS):
    parts, y = sampler_panel(n, p, False, 0)
    more, y = sampler_panel(n, p, True, y + 20)
    slots = max(len(sampler_split(n, p, False)[0]), n)
    width = RANK_LABEL_W + slots * (CELL + CELL_GAP) - CELL_GAP + 2
    return diagram(
        f"fig-sampler-split-{n}-{p}",
        "".join(parts + more),
        width=width,
        height=y,
        font_size=FONT,
        alt=sampler_alt(n, p),
        caption=(
            f"DistributedSampler over {n} indices on {p} ranks, shuffle off: the list every rank "
            "computes, and the indices each rank takes from it. Padding repeats the first "
            "indices so that every rank gets as many; drop_last=True cuts the tail instead."
        ),
        key_entries=(
            (swatch("faint"), "an index dealt once (r0, r1, ...: the rank it goes to)"),
            (swatch("primary"), "padding: one of the first indices, dealt again"),
            (swatch("none", dashed=True), "dropped by drop_last=True: no rank sees it"),
        ),
        label="How DistributedSampler splits the indices",
    )


VIEWS = {"collectives": collectives_view, "buckets": buckets_view}
DRAWINGS = {"sampler-split": sampler_figure}
