"""The figures of chapters 1 and 5, and the Slurm lab, drawn at build time with the figure kit
(views/kit.py).

    <!-- figure:ranks-2x4 -->               chapter 1: 2 nodes x 4 GPUs, one process per GPU,
                                            RANK and LOCAL_RANK, replicas, shards, all-reduce
    <!-- lab:two-nodes:nodes-rendezvous --> chapter 5: the agents, the rendezvous store on node 0
                                            and the workers' store, from the two-node lab's run
    <!-- lab:slurm:slurm-tree -->           the Slurm lab: sbatch -> srun -> torchrun -> workers,
                                            from the lab's torchrun job as it ran

Each is drawn tall rather than wide, so that its smallest text stays legible on a phone
(common.LEGIBLE_PX at common.PHONE_COLUMN_PX). Numbers come from code (the ranks
of chapter 1) or from a lab's record, never typed here.
"""

import re
from functools import partial

from views import kit
from views.kit import ACCENT, DASHES, arrowhead, diagram, outlines, swatch, text

FONT = 12  # the smallest text of every figure here: width <= 32.5 * 12 = 390 fits a phone


LINES = f'<g class="fig-stroke--accent" fill="none" stroke="{ACCENT}" stroke-width="1.5">'


# The kit's box, left unoutlined: compose() outlines every box of a figure through one group.
box = partial(kit.box, outlined=False)


def line(d, uid=None, dashed=False):
    """A connector; compose() draws it in the accent colour. `uid`: end in an arrowhead."""
    head = f' marker-end="url(#{uid}-arrow)"' if uid else ""
    return f'<path d="{d}"{head}{DASHES if dashed else ""}/>'


def compose(parts):
    """The figure's body: shapes, then connectors over them, then the words over both. Each
    kind shares its stroke through one group, which keeps the page's HTML small."""
    shapes = [p for p in parts if p.startswith("<rect")]
    lines = [p for p in parts if p.startswith("<path")]
    rest = [p for p in parts if not p.startswith(("<rect", "<path"))]
    return outlines(shapes) + LINES + "".join(lines) + "</g>" + "".join(rest)


ARROW_SWATCH = (
    LINES
    + line("M4,11H36")
    + f'</g><path class="fig-arrowhead" d="M34,6L42,11L34,16z" fill="{ACCENT}"/>'
)


# ---------------------------------------------------------------------------------------------
# Chapter 1: the picture behind it, 2 nodes x 4 GPUs
# ---------------------------------------------------------------------------------------------
NODES, GPUS_PER_NODE = 2, 4


def ranks_2x4(nodes=NODES, per_node=GPUS_PER_NODE):
    """(node, local_rank, rank) for every process, rank = node * per_node + local_rank."""
    return [(n, lr, n * per_node + lr) for n in range(nodes) for lr in range(per_node)]


def ranks_alt(processes, per_node):
    world = len(processes)
    nodes = sorted({n for n, _, _ in processes})
    where = "; ".join(
        f"node {n} runs "
        + ", ".join(f"RANK {r} (LOCAL_RANK {lr}, GPU {lr})" for m, lr, r in processes if m == n)
        for n in nodes
    )
    return (
        f"{len(nodes)} nodes with {per_node} GPUs each run {world} processes, one per GPU, and "
        f"RANK = node x {per_node} + LOCAL_RANK: {where}. Every process holds a full replica "
        f"of the model and takes its own shard of each batch, shard r for RANK r, from which "
        f"it computes its own gradient g0 to g{world - 1}. One all-reduce joins all {world} "
        f"gradients and hands every process their average, (g0 + ... + g{world - 1}) / {world}."
    )


def ranks_figure(nodes=NODES, per_node=GPUS_PER_NODE):
    uid = "fig-ranks-2x4"
    processes = ranks_2x4(nodes, per_node)
    world = len(processes)
    width, row_h, head_h, gap = 384, 46, 26, 14
    bus_x, bus_w = 332, 44
    parts, y, grad_ys = [arrowhead(f"{uid}-arrow")], 8, []
    for n in range(nodes):
        node_h = head_h + per_node * row_h + 4
        parts.append(box(4, y, bus_x - 12, node_h, "none", rx=6))
        parts.append(text(14, y + 13, f"node {n}: {per_node} GPUs", anchor="start", bold=True))
        for _, lr, r in (p for p in processes if p[0] == n):
            top = y + head_h + (lr * row_h)
            mid = top + 19
            parts.append(box(12, top, 104, 38, "faint"))
            parts.append(text(64, mid - 8, f"RANK {r}", bold=True))
            parts.append(text(64, mid + 8, f"LOCAL_RANK {lr}"))
            parts.append(box(122, top, 68, 38, "primary"))
            parts.append(text(156, mid - 8, "replica"))
            parts.append(text(156, mid + 8, f"on GPU {lr}"))
            parts.append(box(196, top, 64, 38, "accent"))
            parts.append(text(228, mid - 8, "shard"))
            parts.append(text(228, mid + 8, f"{r} of {world}"))
            parts.append(box(266, top + 7, 44, 24, "none"))
            parts.append(text(288, mid, f"g{r}"))
            parts.append(line(f"M310,{mid:g}H{bus_x - 2}", f"{uid}"))
            grad_ys.append(mid)
        y += node_h + gap
    bus_top, bus_bottom = grad_ys[0] - 20, grad_ys[-1] + 20
    parts.append(box(bus_x, bus_top, bus_w, bus_bottom - bus_top, "accent", rx=8))
    for i, word in enumerate(["all-", "reduce"]):
        parts.append(text(bus_x + bus_w / 2, (bus_top + bus_bottom) / 2 + (i - 0.5) * 16, word))
    y = bus_bottom + 20
    parts.append(text(width / 2, y, f"every process receives (g0 + ... + g{world - 1}) / {world}"))
    parts.append(text(width / 2, y + 18, "and takes the same optimizer step", muted=True))
    height = y + 32
    return diagram(
        uid,
        compose(parts),
        width=width,
        height=height,
        font_size=FONT,
        alt=ranks_alt(processes, per_node),
        caption=(
            f"{nodes} nodes x {per_node} GPUs: {world} processes. LOCAL_RANK counts the "
            "processes of one node and picks its GPU; RANK counts the whole job. Every "
            "process holds the same replica and its own shard of each batch; the all-reduce "
            "is the one place where their gradients meet."
        ),
        key_entries=[
            (swatch("faint"), "one process, as torchrun numbers it"),
            (swatch("primary"), "a full replica of the model, the same in every process"),
            (swatch("accent"), "this process's shard of every batch, a different one each"),
            (ARROW_SWATCH, "its gradient g, computed on its shard, sent into the all-reduce"),
        ],
        label="Processes, ranks and the all-reduce on 2 nodes",
    )


# ---------------------------------------------------------------------------------------------
# Chapter 5: the rendezvous, from the two-node lab's run
# ---------------------------------------------------------------------------------------------
def endpoint_of(command):
    """('node0', 29400) from a torchrun command's --rdzv_endpoint=HOST:PORT."""
    match = re.search(r"--rdzv_endpoint=(?P<host>[\w.-]+):(?P<port>\d+)", command)
    return match["host"], int(match["port"])


def rendezvous_facts(result):
    """What the rendezvous figure draws, all read from the two-node lab's record."""
    train = result["parts"]["train"]
    host, port = endpoint_of(train["command"])
    run_id = re.search(r"--rdzv_id=(\S+)", train["command"])[1]
    hosts = result["clusters"]["train"]["hosts"]
    listening = result["parts"]["store"]["listening"]
    nodes = sorted(
        {r["node"] for r in train["ranks"]},
        key=lambda n: min(r["group_rank"] for r in train["ranks"] if r["node"] == n),
    )
    return {
        "endpoint": (host, port),
        "run_id": run_id,
        "listening": listening,
        "nodes": [
            {
                "name": n,
                "address": hosts[n],
                "group_rank": next(r["group_rank"] for r in train["ranks"] if r["node"] == n),
                "ranks": [(r["rank"], r["local_rank"]) for r in train["ranks"] if r["node"] == n],
            }
            for n in nodes
        ],
        "world": train["ranks"][0]["world"],
    }


def rendezvous_alt(facts):
    host, port = facts["endpoint"]
    nodes = "; ".join(
        f"{n['name']} ({n['address']}) runs one elastic agent, which got GROUP_RANK "
        f"{n['group_rank']} and started workers "
        + ", ".join(f"RANK {r} (LOCAL_RANK {lr})" for r, lr in n["ranks"])
        for n in facts["nodes"]
    )
    return (
        f"The two-node lab's rendezvous: {nodes}. Both agents join the rendezvous store "
        f"that {host}'s agent serves at --rdzv_endpoint={host}:{port} (it listened on "
        f"{', '.join(facts['listening'])}), under the rendezvous id {facts['run_id']}. The "
        "agent with GROUP_RANK 0 also serves a second store, at a free port it picks, and "
        "hands its address to every worker as MASTER_ADDR and MASTER_PORT; all "
        f"{facts['world']} workers open their process group there."
    )


def rendezvous_view(context):
    facts = rendezvous_facts(context.result)
    uid = f"fig-{context.run.name}-rendezvous"
    host, port = facts["endpoint"]
    width, trunk = 384, 376  # the agents' link to node 0 runs outside the node boxes
    parts, y = [arrowhead(f"{uid}-arrow")], 8
    agent_ys, worker_ys = [], []
    store_x, store_w = 204, 150
    for index, node in enumerate(facts["nodes"]):
        workers = len(node["ranks"])
        node_h = 30 + 72 + workers * 46 + 2
        parts.append(box(4, y, 362, node_h, "none", rx=6))
        parts.append(
            text(14, y + 14, f"{node['name']}  {node['address']}", anchor="start", bold=True)
        )
        top = y + 30
        parts.append(box(14, top, 160, 58, "faint"))
        parts.append(text(94, top + 13, "elastic agent", bold=True))
        parts.append(text(94, top + 29, "torchrun"))
        parts.append(text(94, top + 45, f"GROUP_RANK {node['group_rank']}"))
        agent_ys.append(top + 29)
        wtop = top + 72
        if index == 0:  # the agent the rendezvous numbered 0: both stores live here
            middle = store_x + store_w / 2
            parts.append(box(store_x, top, store_w, 58, "accent"))
            parts.append(text(middle, top + 13, "rendezvous store", bold=True))
            parts.append(text(middle, top + 29, f"{host}:{port}"))
            parts.append(text(middle, top + 45, "--rdzv_endpoint"))
            parts.append(line(f"M174,{top + 29}H{store_x - 2}", uid))
            store_h = max(workers * 46 - 8, 74)
            store_bottom = wtop + store_h
            parts.append(box(store_x, wtop, store_w, store_h, "primary"))
            for i, (words, bold) in enumerate(
                (
                    ("workers' store", True),
                    ("served by this agent", False),
                    ("at MASTER_PORT,", False),
                    ("a free port", False),
                )
            ):
                parts.append(text(middle, wtop + 13 + 16 * i, words, bold=bold))
        for i, (rank, local_rank) in enumerate(node["ranks"]):
            wy = wtop + i * 46
            parts.append(box(30, wy, 144, 38, "faint", dashed=True))
            parts.append(text(102, wy + 11, f"worker RANK {rank}", bold=True))
            parts.append(text(102, wy + 27, f"LOCAL_RANK {local_rank}"))
            parts.append(line(f"M22,{top + 58}V{wy + 19}H28", uid))
            if index == 0:
                parts.append(line(f"M174,{wy + 19}H{store_x - 2}", uid, dashed=True))
            else:
                worker_ys.append(wy + 19)
        y += node_h + 12
    # The other agents reach the rendezvous store from their nodes, around the node boxes;
    # the other nodes' workers reach the workers' store up the gap between the columns.
    for ay in agent_ys[1:]:
        parts.append(line(f"M174,{ay}H{trunk}V{agent_ys[0]}H{store_x + store_w + 2}", uid))
    gap = (174 + store_x) / 2
    for wy in worker_ys:
        parts.append(line(f"M174,{wy}H{gap}", dashed=True))
    if worker_ys:
        up = store_bottom - 8
        parts.append(line(f"M{gap},{max(worker_ys)}V{up}H{store_x - 2}", uid, dashed=True))
    height = y
    return (
        diagram(
            uid,
            compose(parts),
            width=width,
            height=height,
            font_size=FONT,
            alt=rendezvous_alt(facts),
            caption=(
                "The rendezvous of the two-node lab, as it ran: one agent per node meets the "
                f"others at the store behind --rdzv_endpoint ({host}:{port}); the agent the "
                "rendezvous numbered 0 then serves the store the workers' process group opens "
                "at MASTER_ADDR:MASTER_PORT, a port the record does not keep."
            ),
            key_entries=[
                (swatch("faint"), "a torchrun elastic agent, one per node"),
                (swatch("faint", dashed=True), "a worker: your script, one per GPU"),
                (swatch("accent"), "the rendezvous store, at --rdzv_endpoint"),
                (swatch("primary"), "the workers' store, at MASTER_ADDR:MASTER_PORT"),
                (ARROW_SWATCH, "starts, or connects to"),
            ],
            label="The two-node rendezvous",
        )
        + "\n"
    )


# ---------------------------------------------------------------------------------------------
# The Slurm lab: sbatch -> srun -> torchrun -> workers, from its torchrun job
# ---------------------------------------------------------------------------------------------
def launch_tree(job):
    """Levels of the launch tree, read from the lab's record of one torchrun job.

    The record keeps each task's host and each rank's GROUP_RANK, not which host got which
    GROUP_RANK: the c10d rendezvous numbers the agents in the order of their node names, so
    the tasks, sorted by host, take GROUP_RANK 0, 1, ... in that order.
    """
    rendezvous = re.search(r"rendezvous (\S+), restart", job["log"])[1]
    tasks = sorted(job["tasks"], key=lambda t: t["host"])
    groups = sorted({r["group_rank"] for r in job["ranks"]})
    assert len(groups) == len(tasks), (groups, tasks)
    first = [r for r in job["ranks"] if r.get("resume_step", 0) == 0]
    agents = []
    for task, group in zip(tasks, groups, strict=True):
        workers = sorted(
            (r["rank"], r["local_rank"], r["device"]) for r in first if r["group_rank"] == group
        )
        agents.append({**task, "group_rank": group, "workers": workers})
    return {
        "id": job["id"],
        "sbatch": job["sbatch"],
        "script": next(word for word in job["sbatch"].split() if word.endswith(".sbatch")),
        "nodelist": job["show_job"]["NodeList"],
        "rendezvous": rendezvous,
        "agents": agents,
    }


def tree_alt(tree):
    agents = "; ".join(
        f"task {a['task']} on {a['host']} (CUDA_VISIBLE_DEVICES={a['visible']}) runs torchrun, "
        f"whose agent got GROUP_RANK {a['group_rank']} and started "
        + ", ".join(f"RANK {r} (LOCAL_RANK {lr}, device {d})" for r, lr, d in a["workers"])
        for a in tree["agents"]
    )
    return (
        f"The Slurm lab's launch tree: `{tree['sbatch']}` queued job {tree['id']} on "
        f"{tree['nodelist']}. Slurm ran the batch script once, on the first node; its srun "
        f"started {len(tree['agents'])} tasks: {agents}. The agents met at the rendezvous "
        f"{tree['rendezvous']}."
    )


def tree_view(context):
    tree = launch_tree(context.result["jobs"]["torchrun"])
    uid = f"fig-{context.run.name}-tree"
    width, col_w = 384, 180
    parts = [arrowhead(f"{uid}-arrow")]

    def level(y, x, w, lines, kind="faint", dashed=False):
        parts.append(box(x, y, w, 16 * len(lines) + 10, kind, dashed=dashed))
        for i, (words, bold) in enumerate(lines):
            parts.append(text(x + w / 2, y + 13 + 16 * i, words, bold=bold))
        return y + 16 * len(lines) + 10

    bottom = level(
        6,
        8,
        width - 16,
        [
            (f"sbatch {tree['script']}", True),
            (f"job {tree['id']} on nodes {tree['nodelist']}", False),
        ],
    )
    parts.append(line(f"M{width / 2},{bottom}V{bottom + 16}", uid))
    bottom = level(
        bottom + 18,
        8,
        width - 16,
        [("batch script, once, first node", True), (f"rendezvous at {tree['rendezvous']}", False)],
    )
    parts.append(line(f"M{width / 2},{bottom}V{bottom + 16}", uid))
    bottom = level(
        bottom + 18,
        8,
        width - 16,
        [("srun", True), (f"{len(tree['agents'])} tasks, one per node", False)],
        "accent",
    )
    fork = bottom
    for column, agent in enumerate(tree["agents"]):
        x = 8 + column * (col_w + width - 16 - 2 * col_w)
        cx = x + col_w / 2
        parts.append(line(f"M{cx},{fork}V{fork + 16}", uid))
        y = level(
            fork + 18,
            x,
            col_w,
            [
                (f"task {agent['task']} on {agent['host']}", True),
                (f"GPUs {agent['visible']} visible", False),
            ],
        )
        parts.append(line(f"M{cx},{y}V{y + 16}", uid))
        y = level(
            y + 18,
            x,
            col_w,
            [("torchrun agent", True), (f"GROUP_RANK {agent['group_rank']}", False)],
            "primary",
        )
        agent_bottom = y  # the agent starts every worker: one trunk, a branch to each
        for rank, local_rank, device in agent["workers"]:
            top = y + 12
            parts.append(line(f"M{x + 8},{agent_bottom}V{top + 29}H{x + 20}", uid))
            y = level(
                top,
                x + 22,
                col_w - 22,
                [
                    (f"RANK {rank}", True),
                    (f"LOCAL_RANK {local_rank}", False),
                    (f"device {device}", False),
                ],
                dashed=True,
            )
    height = y + 6
    return (
        diagram(
            uid,
            compose(parts),
            width=width,
            height=height,
            font_size=FONT,
            alt=tree_alt(tree),
            caption=(
                f"Who started whom in the lab's job {tree['id']}, as it ran: sbatch queued it, "
                "Slurm ran the batch script, srun started one task per node, each task is "
                "torchrun, and each agent started one worker per GPU Slurm gave its node."
            ),
            key_entries=[
                (swatch("faint"), "Slurm: the job, its batch script, a task"),
                (swatch("accent"), "srun, inside the batch script"),
                (swatch("primary"), "torchrun: one elastic agent per node"),
                (swatch("faint", dashed=True), "a worker, one rank of the job"),
            ],
            label="The Slurm launch tree",
        )
        + "\n"
    )


VIEWS = {"nodes-rendezvous": rendezvous_view, "slurm-tree": tree_view}
DRAWINGS = {"ranks-2x4": ranks_figure}
