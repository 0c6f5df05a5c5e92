"""The views every lab has: the command, what it printed, and its provenance.

<!-- lab:NAME:command -->     the command a reader types
<!-- lab:NAME:stdout -->      what the run printed
<!-- lab:NAME:provenance -->  one line (torch, date, machine), every fact one click away
"""

from views.common import fence, machine


def command_view(context):
    return fence("bash", " ".join(context.run.command))


def stdout_view(context):
    if context.run.recorded is not None:
        title = f"Printed on {machine(context.result)}, {context.record['started_utc']}"
    else:
        title = f"Printed when this site was built ({context.record['started_utc']})"
    return fence("text", context.record["stdout"], title)


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


def not_recorded(context):
    record = context.run.recorded.relative_to(context.root).as_posix()
    return (
        '!!! warning "No run recorded yet"\n\n'
        f"    This run needs a GPU, which the machines that build this site do not have, and "
        f"none has been recorded yet (`{record}` "
        "does not exist). Its output will appear here once someone runs `nox -s record-gpu` "
        "on a GPU machine and commits the file.\n"
    )


VIEWS = {"command": command_view, "stdout": stdout_view, "provenance": provenance_view}
