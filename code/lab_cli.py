"""The command line the two DDP labs have in common, checked before either lab imports torch.

gloo.py and nccl.py take the same core options and refuse bad values with the same
one-line errors; each lab adds its own options around these. Nothing here imports torch, so a
typo is reported in milliseconds instead of after the seconds that `import torch` costs.
"""

import argparse
import os
import sys

# What torchrun sets for every worker it starts; --torchrun refuses to run without all five.
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports bad input in one line (no usage block) with exit status 2."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def add_world_size_steps_timeout(parser, world_size_help, timeout):
    """The run's size and patience; `timeout` is this lab's default, in seconds."""
    parser.add_argument("--world-size", type=int, default=None, help=world_size_help)
    parser.add_argument(
        "--steps",
        type=int,
        default=5,
        help="optimizer steps per training variant; each step is one epoch",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=timeout,
        help="seconds a rank waits for the others at a collective or checkpoint",
    )


def add_torchrun_and_json(parser):
    """How the ranks are found (torchrun's environment or our own spawn) and where results go."""
    parser.add_argument(
        "--torchrun",
        action="store_true",
        help="take rank and world size from torchrun's environment (env://)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every result to PATH as JSON")


def check_common(parser, args):
    """Refuse what no lab can run. Under --torchrun, args.world_size becomes WORLD_SIZE.

    Without --torchrun and --world-size, args.world_size stays None: each lab has its own default.
    """
    if args.torchrun:
        missing = [name for name in TORCHRUN_VARS if not os.environ.get(name)]
        if missing:
            parser.error(f"--torchrun needs torchrun's environment; {', '.join(missing)} not set")
        from_env = int(os.environ["WORLD_SIZE"])
        if args.world_size not in (None, from_env):
            parser.error(f"--world-size {args.world_size} disagrees with WORLD_SIZE={from_env}")
        args.world_size = from_env
    if args.world_size is not None and args.world_size < 1:
        parser.error(f"--world-size must be at least 1, got {args.world_size}")
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        parser.error(f"--json {args.json}: directory {os.path.dirname(args.json)!r} does not exist")
