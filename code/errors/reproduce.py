"""Make the errors of the site's error index happen on this machine, and show what torch says.

    python code/errors/reproduce.py                      # every error the index reproduces
    python code/errors/reproduce.py module-prefix-unexpected   # one of them
    python code/errors/reproduce.py --json errors.json   # and keep what each printed

Each error of the index that happens on a CPU has a function in triggers.py named after it
(`module-prefix-unexpected` -> `module_prefix_unexpected`). A trigger either raises torch's
exception here, in this process, or starts the child process the error needs (a worker killed
by a signal, a start method that pickles) and returns what the child printed. Either way this
script prints the message as a reader's terminal shows it, with the temporary folder the
trigger worked in written as $TMP, so that one run's output reads like the next.

Runs on CPU with gloo only, and leaves no process group, store or file behind: every trigger
gets a fresh temporary folder, removed when it returns. A trigger that hangs instead of failing
ends the run at its deadline, its name the last line printed and every thread's stack after it.
"""

import argparse
import faulthandler
import inspect
import json
import pathlib
import re
import sys
import tempfile
import time
import traceback

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # code/, for pace
import pace  # noqa: E402

# Seconds one trigger may take, stretched for this machine: 30 on pace's reference machine,
# where the slowest (a child Python that spawns another) takes about 5. Measured here, before
# torch is imported, pace times this script's own import instead of a fresh one.
TRIGGER_LIMIT = pace.limit(30)

import torch  # noqa: E402
import triggers  # noqa: E402


def live_errors():
    """Every error triggers.py can make happen, in the file's order."""
    functions = inspect.getmembers(triggers, inspect.isfunction)
    mine = [f for _, f in functions if f.__module__ == triggers.__name__]
    public = [f for f in mine if not f.__name__.startswith("_")]
    return [
        f.__name__.replace("_", "-")
        for f in sorted(public, key=lambda f: f.__code__.co_firstlineno)
    ]


def as_printed(error):
    """An exception as the last lines of a traceback show it: `module.Name: message`."""
    return "".join(traceback.format_exception_only(error)).rstrip()


def reproduce(error_id):
    """What torch printed when `error_id` happened, with the trigger's folder as $TMP."""
    trigger = getattr(triggers, error_id.replace("-", "_"))
    with tempfile.TemporaryDirectory(prefix="ddp-error-") as tmp:
        try:
            printed = trigger(tmp)
        except Exception as error:  # the error we came for: a trigger raises nothing else
            printed = as_printed(error)
        if not printed:
            sys.exit(f"reproduce.py: {error_id} printed nothing: the error did not happen")
        # as a page shows it: no terminal's bold (torch.load's), the folder as $TMP
        return re.sub(r"\x1b\[[0-9;]*m", "", printed).replace(tmp, "$TMP")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", help="errors to reproduce (default: every live one)")
    parser.add_argument("--json", metavar="PATH", help="write {id: message} and torch's release")
    args = parser.parse_args()
    ids = args.ids or live_errors()
    messages, seconds = {}, {}
    for error_id in ids:
        print(f"== {error_id} ==", flush=True)
        started = time.perf_counter()
        # a hang (a forked worker stuck on a lock) exits with every thread's stack on stderr
        faulthandler.dump_traceback_later(TRIGGER_LIMIT, exit=True)
        messages[error_id] = reproduce(error_id)
        faulthandler.cancel_dump_traceback_later()
        seconds[error_id] = round(time.perf_counter() - started, 2)
        print(f"{messages[error_id]}\n", flush=True)
    if args.json:
        result = {"torch": torch.__version__, "messages": messages, "seconds": seconds}
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
