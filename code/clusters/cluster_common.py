"""What the cluster labs share besides their hosts: the machine check, the reference, the report.

The two-node lab (two_nodes.py) and the Slurm lab (slurm.py) both refuse a machine
that cannot make network namespaces, train with elastic_train.py, compare what their ranks
ended with to the one-process reference, and print a report that goes on a page. Those
pieces live here, once; the namespaces themselves and their teardown live in netns.py.
"""

import os
import shutil
import subprocess
import sys
import textwrap
import threading


def require_root_and_tools(parser, not_root, tools, hint):
    """Refuse, in one line, a machine that cannot run the lab: status 2, as for bad input.

    `not_root` is the whole line printed without root; a missing tool names `hint`, the
    packages that bring it.
    """
    if os.geteuid() != 0:
        print(not_root, file=sys.stderr)
        sys.exit(2)  # as for bad input: this machine cannot run it as asked
    missing = ", ".join(tool for tool in tools if not shutil.which(tool))
    if missing:
        parser.error(f"needs {missing} on PATH ({hint})")
    # Root in a container may still lack CAP_SYS_ADMIN: try a namespace that lives for
    # one `true` and leaves nothing behind.
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        parser.error("cannot create network namespaces here (needs CAP_SYS_ADMIN)")


class Reference(threading.Thread):
    """The one-process reference's final parameters, computed while the jobs run.

    The launcher waits most of a run, so it imports torch meanwhile (elastic_train imports
    it) and trains the reference. A daemon thread, so that a SIGTERM or a failed job need
    not wait for it to finish.
    """

    def __init__(self, steps):
        super().__init__(daemon=True)
        self.steps, self.params = steps, None

    def run(self):
        import elastic_train

        self.params = elastic_train.params_hex(elastic_train.reference(self.steps))

    def wait(self):
        """The reference's parameters, as float.hex() strings, once it has them."""
        self.join()
        return self.params


def final_params(events, failure):
    """The parameters every rank ended with, as float.hex() strings (all must agree);
    the lab exits with `failure: N different final parameter sets` if they do not."""
    finals = {tuple(e["params"]) for e in events if e["event"] == "done"}
    if len(finals) != 1:
        sys.exit(f"{failure}: {len(finals)} different final parameter sets")
    return list(finals.pop())


def max_abs_diff(hex_a, hex_b):
    """The largest difference between two parameter lists of float.hex() strings."""
    pairs = zip(hex_a, hex_b, strict=True)
    return max(abs(float.fromhex(a) - float.fromhex(b)) for a, b in pairs)


def say(text="", indent=""):
    """Print `text` wrapped to 88 columns: every line of this report goes on a page."""
    more = indent + "  "
    print(textwrap.fill(text, 88, initial_indent=indent, subsequent_indent=more))


def continued_lines(words, width):
    """`words` joined by spaces, broken with a backslash before a line passes `width`; a
    continuation line is indented four spaces, as a reader types a long command."""
    lines = [words[0]]
    for word in words[1:]:
        if len(lines[-1]) + len(word) > width:
            lines[-1] += " \\"
            lines.append("    " + word)
        else:
            lines[-1] += " " + word
    return "\n".join(lines)
