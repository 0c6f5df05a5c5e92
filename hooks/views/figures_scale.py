"""The figures of chapters 6 to 8, drawn at build time with the figure kit (views/kit.py).

    <!-- lab:where-stuck:stuck-ranks -->   chapter 6: where each rank of the hung job waits,
                                           from the py-spy dumps in the where-stuck record
    <!-- figure:hide-or-wait -->           chapter 7: backward against the gradient all-reduce
                                           as a fixed global batch is split over more GPUs
    <!-- figure:ddp-memory -->             chapter 7: one DDP rank's bytes, stacked by kind
    <!-- lab:zero:zero-stages -->          chapter 8: each rank's bytes under DDP, ZeRO-1,
                                           ZeRO-2 and FSDP2, from the ZeRO lab's 4-rank run

Chapter 7's two drawings compute their numbers here, with the model and the example inputs
of that chapter's "scaling model" block (assumed hardware, not a measurement); the lab views
read every number they draw from the record.
"""

from views.kit import box, diagram, swatch, text

FONT = 14  # every figure here uses one text size: 14 units
WIDTH = 440  # 14 * 358 / 440 = 11.4 px on a 390 px phone: legible without scrolling


# ---------------------------------------------------------------------------------------------
# Chapter 7: when the all-reduce stops hiding (the chapter's model, strong scaling)
# ---------------------------------------------------------------------------------------------
# The example inputs of chapter 7's "scaling model" block: assumed, not measured.
PARAMS = 1e9  # P
GRAD_BYTES = 4 * PARAMS  # S: fp32 gradients (autocast leaves parameters and buckets fp32)
BUS_BYTES_PER_S = 200e9  # bus bandwidth
FLOPS = 400e12  # achieved FLOP/s per GPU
# The global batch the figure holds fixed: 8 GPUs at 16 K tokens each, the chapter's example.
GLOBAL_TOKENS = 8 * 16 * 1024
GPU_COUNTS = (8, 16, 32, 64, 128, 256)


def allreduce_seconds(grad_bytes, world, bus_bytes_per_s):
    """Ring all-reduce: each GPU moves 2(p-1)/p of the bytes at the bus bandwidth."""
    return 2 * (world - 1) / world * grad_bytes / bus_bytes_per_s


def backward_seconds(params, tokens, flops_per_s):
    """Backward of a dense model: 4 FLOPs per parameter per token."""
    return 4 * params * tokens / flops_per_s


def strong_scaling():
    """One row per GPU count: the same global batch, split ever thinner."""
    rows = []
    for gpus in GPU_COUNTS:
        assert GLOBAL_TOKENS % gpus == 0, "the global batch must split evenly"
        tokens = GLOBAL_TOKENS // gpus
        rows.append(
            {
                "gpus": gpus,
                "tokens": tokens,
                "backward_ms": 1e3 * backward_seconds(PARAMS, tokens, FLOPS),
                "allreduce_ms": 1e3 * allreduce_seconds(GRAD_BYTES, gpus, BUS_BYTES_PER_S),
            }
        )
    return rows


def verdict(row):
    exposed = row["allreduce_ms"] - row["backward_ms"]
    return "hidden" if exposed <= 0 else f"waits {exposed:.1f} ms"


def hide_or_wait():
    rows = strong_scaling()
    left, value_room, row_h = 10, 72, 64
    scale = (WIDTH - left - value_room) / max(r["backward_ms"] for r in rows)
    parts = []
    for i, row in enumerate(rows):
        y = 6 + i * row_h
        parts.append(
            text(
                left,
                y + 8,
                f"{row['gpus']} GPUs, {row['tokens']:,} tokens each",
                anchor="start",
                bold=True,
            )
        )
        hidden = row["allreduce_ms"] <= row["backward_ms"]
        parts.append(
            text(WIDTH - 6, y + 8, verdict(row), anchor="end", muted=hidden, bold=not hidden)
        )
        for k, (key_name, kind) in enumerate(
            (("backward_ms", "primary"), ("allreduce_ms", "accent"))
        ):
            bar_y, width = y + 20 + k * 18, row[key_name] * scale
            parts.append(box(left, bar_y, width, 15, kind, rx=0))
            parts.append(
                text(left + width + 4, bar_y + 7.5, f"{row[key_name]:.1f} ms", anchor="start")
            )
    height = 6 + len(rows) * row_h
    first_wait = next(r for r in rows if r["allreduce_ms"] > r["backward_ms"])
    alt = (
        f"Bars of milliseconds per step, from chapter 7's model with its example inputs: a "
        f"{PARAMS:.0e}-parameter model with fp32 gradients, {BUS_BYTES_PER_S / 1e9:g} GB/s of "
        f"bus bandwidth, {FLOPS / 1e12:g} TFLOP/s per GPU, and a global batch of "
        f"{GLOBAL_TOKENS:,} tokens split over more and more GPUs. "
        + " ".join(
            f"{r['gpus']} GPUs, {r['tokens']:,} tokens each: backward {r['backward_ms']:.1f} "
            f"ms, all-reduce {r['allreduce_ms']:.1f} ms, {verdict(r)}."
            for r in rows
        )
    )
    caption = (
        f"The global batch stays at {GLOBAL_TOKENS:,} tokens; each row splits it over more "
        "GPUs. Backward halves with every doubling; the all-reduce does not shrink at all "
        f"(it creeps up with 2(p-1)/p). From {first_wait['gpus']} GPUs on, it outlasts "
        "backward and the step waits on the network. Computed with the chapter's model and "
        'example inputs, not measured; "hidden" is the optimistic reading.'
    )
    return diagram(
        "fig-hide-or-wait",
        "".join(parts),
        width=WIDTH,
        height=height,
        font_size=FONT,
        alt=alt,
        caption=caption,
        key_entries=[
            (swatch("primary", rx=0), "backward on one GPU"),
            (swatch("accent", rx=0), "the gradient all-reduce (ring)"),
        ],
        label="Backward against all-reduce as GPUs are added",
    )


# ---------------------------------------------------------------------------------------------
# Chapter 7: one DDP rank's memory, by kind
# ---------------------------------------------------------------------------------------------
# What each kind of byte looks like, in every memory figure of this module: the kit's box
# arguments. Bars are square-cornered, so that a stack of them reads as one bar. The fp32
# master copy is the weights again, so it wears their colour, dashed.
KINDS = {
    "weights": {"kind": "primary", "rx": 0},
    "fp32 master copy": {"kind": "primary", "dashed": True, "rx": 0},
    "gradients": {"kind": "accent", "rx": 0},
    "Adam's moments": {"kind": "faint", "rx": 0},
    "DDP's bucket copy": {"kind": "none", "dashed": True, "rx": 0},
}


def ddp_rank_bytes():
    """Bytes per parameter on one DDP rank, by kind, for the three layouts chapter 7 names."""
    moments = 4 + 4  # exp_avg and exp_avg_sq, fp32
    return [
        (
            "fp32 parameters under autocast, DDP's default",
            [
                ("weights", 4),
                ("gradients", 4),
                ("Adam's moments", moments),
                ("DDP's bucket copy", 4),
            ],
        ),
        (
            "the same with gradient_as_bucket_view=True",
            [("weights", 4), ("gradients", 4), ("Adam's moments", moments)],
        ),
        (
            "bf16 parameters, fp32 master copy, DDP's default",
            [
                ("weights", 2),
                ("gradients", 2),
                ("fp32 master copy", 4),
                ("Adam's moments", moments),
                ("DDP's bucket copy", 2),
            ],
        ),
    ]


def ddp_memory():
    layouts = ddp_rank_bytes()
    left, value_room, row_h, bar_h = 10, 62, 62, 24
    most = max(sum(b for _, b in parts) for _, parts in layouts)
    scale = (WIDTH - left - value_room) / most  # units per byte per parameter
    shapes, words = [], []
    for i, (name, parts) in enumerate(layouts):
        y = 6 + i * row_h
        words.append(text(left, y + 8, name, anchor="start", bold=True))
        x = left
        for kind, per_param in parts:
            width = per_param * scale
            shapes.append(box(x, y + 20, width, bar_h, **KINDS[kind]))
            words.append(text(x + width / 2, y + 20 + bar_h / 2, f"{per_param * PARAMS / 1e9:g}"))
            x += width
        total = sum(b for _, b in parts)
        words.append(
            text(
                x + 5, y + 20 + bar_h / 2, f"{total * PARAMS / 1e9:g} GB", anchor="start", bold=True
            )
        )
    height = 6 + len(layouts) * row_h
    alt = (
        f"Stacked bars of one DDP rank's memory for a {PARAMS:.0e}-parameter model trained "
        "with Adam, before activations. "
        + " ".join(
            f"{name}: "
            + ", ".join(f"{kind} {b * PARAMS / 1e9:g} GB" for kind, b in parts)
            + f"; {sum(b for _, b in parts) * PARAMS / 1e9:g} GB in all."
            for name, parts in layouts
        )
    )
    caption = (
        "Gigabytes on one DDP rank; every rank holds all of it, whatever the number of ranks. "
        "Adam's two moments "
        "are half of it; DDP's default adds a second copy of the gradients, in the "
        "parameters' dtype, that bucket views remove. Activations come on top and grow with "
        "the tokens per GPU. Computed for chapter 7's example model."
    )
    return diagram(
        "fig-ddp-memory",
        "".join(shapes + words),
        width=WIDTH,
        height=height,
        font_size=FONT,
        alt=alt,
        caption=caption,
        key_entries=[(swatch(**look), kind) for kind, look in KINDS.items()],
        label="One DDP rank's memory",
    )


# ---------------------------------------------------------------------------------------------
# Chapter 8: what each ZeRO stage shards, rank by rank (code/past_ddp/zero_lab.py's record)
# ---------------------------------------------------------------------------------------------
def kib(count):
    value = count / 1024
    return f"{value:.0f} KiB" if value >= 100 else f"{value:.1f} KiB"


def zero_stages(result, world=4):
    """[(stage, traffic, [per rank [(kind, bytes)]])] for the lab's run on `world` ranks.

    DDP, ZeRO-1 and FSDP2 are measured. ZeRO-2 was not run: its rank keeps ZeRO-1's weights
    and state and only the gradients of the tensors it owns, the bytes of its exp_avg.
    """
    (run,) = [r for r in result["runs"] if r["world_size"] == world]
    ranks = run["ranks"]

    def kinds(params, grads, state):
        return [("weights", params), ("gradients", grads), ("Adam's state", state)]

    stages = [
        (
            "DDP and Adam",
            "all-reduce",
            [kinds(r["param_bytes"], r["grad_bytes"], r["state"]["adam"]["total"]) for r in ranks],
        ),
        (
            "ZeRO-1: ZeroRedundancyOptimizer",
            "all-reduce, then a broadcast per tensor",
            [kinds(r["param_bytes"], r["grad_bytes"], r["state"]["zero"]["total"]) for r in ranks],
        ),
        (
            "ZeRO-2 (derived, not run)",
            "reduce-scatter + all-gather: DDP's traffic",
            [
                kinds(r["param_bytes"], r["state"]["zero"]["exp_avg"], r["state"]["zero"]["total"])
                for r in ranks
            ],
        ),
    ]
    if all(r["fsdp"]["supported"] for r in ranks):
        stages.append(
            (
                "ZeRO-3: FSDP2, fully_shard",
                "all-gathers in both passes, reduce-scatter",
                [
                    kinds(
                        r["fsdp"]["param_bytes"],
                        r["fsdp"]["grad_bytes"],
                        r["fsdp"]["state"]["total"],
                    )
                    for r in ranks
                ],
            )
        )
    return stages


ZERO_KINDS = {
    "weights": KINDS["weights"],
    "gradients": KINDS["gradients"],
    "Adam's state": KINDS["Adam's moments"],
}


def zero_stages_figure(result, uid, world=4):
    stages = zero_stages(result, world)
    left, bar_x, value_room, bar_h = 10, 66, 70, 15
    most = max(sum(b for _, b in rank) for _, _, ranks in stages for rank in ranks)
    scale = (WIDTH - bar_x - value_room) / most
    shapes, words, y = [], [], 6
    for stage, traffic, ranks in stages:
        words.append(text(left, y + 8, stage, anchor="start", bold=True))
        words.append(text(left, y + 27, traffic, anchor="start", muted=True))
        y += 40
        for rank, kinds in enumerate(ranks):
            words.append(text(left, y + bar_h / 2, f"rank {rank}", anchor="start"))
            x = bar_x
            for kind, count in kinds:
                shapes.append(box(x, y, count * scale, bar_h, **ZERO_KINDS[kind]))
                x += count * scale
            words.append(text(x + 5, y + bar_h / 2, kib(sum(c for _, c in kinds)), anchor="start"))
            y += bar_h + 5
        y += 12
    alt = (
        f"Stacked bars of the bytes each of {world} ranks kept in code/past_ddp/zero_lab.py's run, "
        "by weights, gradients and Adam's state. "
        + " ".join(
            f"{stage}: "
            + "; ".join(
                f"rank {rank} "
                + ", ".join(f"{kind} {kib(c)}" for kind, c in kinds)
                + f", {kib(sum(c for _, c in kinds))} in all"
                for rank, kinds in enumerate(ranks)
            )
            + "."
            for stage, _, ranks in stages
        )
    )
    caption = (
        f"Each block is one method on the lab's {world} ranks, each bar one rank's bytes. DDP "
        "keeps everything on every rank. ZeRO-1 splits Adam's state, by whole tensors, so "
        "unevenly. ZeRO-2 also keeps only the gradients of a rank's own tensors; it was not "
        "run, and its bars are ZeRO-1's measurements with the other gradients dropped. FSDP2 "
        f"splits every tensor along its first dimension, so each rank keeps about 1/{world} "
        "of everything. DDP's bucket copy and activations are not counted."
    )
    return diagram(
        uid,
        "".join(shapes + words),
        width=WIDTH,
        height=y - 6,
        font_size=FONT,
        alt=alt,
        caption=caption,
        key_entries=[(swatch(**look), kind) for kind, look in ZERO_KINDS.items()],
        label="Bytes per rank under each ZeRO stage",
    )


def zero_stages_view(context):
    return zero_stages_figure(context.result, f"fig-{context.run.name}-stages")


# ---------------------------------------------------------------------------------------------
# Chapter 6: where each rank of a hung job waits (code/debugging/where_stuck.py's record)
# ---------------------------------------------------------------------------------------------
CELL_STATES = {
    "waits": ("waits here", {"kind": "primary"}),
    "past": ("went past", {"kind": "none", "dashed": True}),
    "never": ("never reached", {"kind": "faint"}),
}


def stuck_grid(result):
    """Rows: each call a rank was found waiting in, by source line; a cell per rank."""
    calls = sorted({(r["line"], r["collective"]) for r in result["ranks"]})
    grid = []
    for line, collective in calls:
        cells = []
        for r in result["ranks"]:
            state = "waits" if r["line"] == line else "past" if r["line"] > line else "never"
            cells.append(state)
        grid.append({"line": line, "collective": collective, "cells": cells})
    return grid


def stuck_words(result):
    """The record in one sentence or two: where each rank waits, and what that points to."""
    ranks = result["ranks"]
    where = "; ".join(
        f"rank {r['rank']} waits in {r['collective']} at {r['file']}:{r['line']}" for r in ranks
    )
    if len({r["collective"] for r in ranks}) > 1:
        return where + ". The ranks wait in different collectives: they took different branches."
    return where + ". Every rank waits in the same call: look for a rank that is gone."


def stuck_ranks_view(context):
    result = context.result
    grid, ranks = stuck_grid(result), result["ranks"]
    left, label_w, cell_w, cell_h, gap, top = 10, 126, 142, 44, 10, 30
    shapes, words = [], []
    for j, r in enumerate(ranks):
        x = left + label_w + j * (cell_w + gap)
        words.append(text(x + cell_w / 2, top / 2, f"rank {r['rank']}", bold=True))
    for i, row in enumerate(grid):
        y = top + i * (cell_h + gap)
        words.append(text(left, y + 13, f"line {row['line']}", anchor="start", bold=True))
        words.append(text(left, y + 31, row["collective"], anchor="start", muted=True))
        for j, state in enumerate(row["cells"]):
            x = left + label_w + j * (cell_w + gap)
            label, look = CELL_STATES[state]
            shapes.append(box(x, y, cell_w, cell_h, **look))
            words.append(
                text(
                    x + cell_w / 2,
                    y + cell_h / 2,
                    label,
                    bold=state == "waits",
                    muted=state == "never",
                )
            )
    width = left + label_w + len(ranks) * (cell_w + gap)
    height = top + len(grid) * (cell_h + gap)
    file = ranks[0]["file"]
    alt = (
        f"A grid of the calls in {file} that {len(ranks)} ranks of a hung job were found "
        "waiting in, one row per source line and one column per rank. "
        + " ".join(
            f"Line {row['line']}, {row['collective']}: "
            + ", ".join(
                f"rank {r['rank']} {CELL_STATES[s][0]}"
                for r, s in zip(ranks, row["cells"], strict=True)
            )
            + "."
            for row in grid
        )
    )
    caption = (
        "The py-spy dumps above, one column per rank and one row per collective a rank waits "
        "in. " + stuck_words(result) + " A collective completes only when every rank of the "
        "group has called it, so each waits for a partner that is waiting somewhere else."
    )
    return diagram(
        f"fig-{context.run.name}-ranks",
        "".join(shapes + words),
        width=width,
        height=height,
        font_size=FONT,
        alt=alt,
        caption=caption,
        key_entries=[(swatch(**look), meaning) for meaning, look in CELL_STATES.values()],
        label="Where each rank waits",
    )


VIEWS = {"zero-stages": zero_stages_view, "stuck-ranks": stuck_ranks_view}
DRAWINGS = {"hide-or-wait": hide_or_wait, "ddp-memory": ddp_memory}
