"""A process that is no part of the job, reading and writing a torchrun job's store.

    python code/clusters/store_outsider.py HOST PORT RUN_ID [WAIT_S]

It connects as a plain TCPStore client (there is no password to give), reads the c10d
rendezvous state, lists every key and writes one of its own. Then it waits for a line on
stdin and tries to connect again, which a firewall rule on HOST should now refuse. The
first visit waits up to WAIT_S seconds (default 20) for the agent to open its store.
code/clusters/two_nodes.py runs it from a third network namespace; it prints one `@@` JSON
line per attempt.
"""

import base64
import datetime
import json
import sys
import time

import torch.distributed as dist

PICKLE_PROTO = b"\x80"  # the first byte of every pickle since protocol 2


def rendezvous_state(store, key, timeout_s):
    """The agents' state, once node 0 has written it (until then, a sentinel)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = base64.b64decode(store.get(key))
        if state[:1] == PICKLE_PROTO or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def visit(host, port, run_id, timeout_s):
    """Connect, look around, leave a mark; return what an outsider learned."""
    store = dist.TCPStore(
        host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s)
    )
    # torchrun's c10d rendezvous keeps its state here: base64 of a pickle, which every
    # agent unpickles. Whoever can write this key hands the agents a pickle to load.
    state = rendezvous_state(store, f"torch.rendezvous.{run_id}", timeout_s)
    keys = sorted(store.list_keys())
    store.set("outsider/was-here", "yes")
    return {
        "connected": True,
        "keys": keys,
        "rdzv_state_bytes": len(state),
        "rdzv_state_is_pickle": state[:1] == PICKLE_PROTO,
        "wrote_and_read_back": store.get("outsider/was-here") == b"yes",
    }


def attempt(host, port, run_id, timeout_s):
    try:
        found = visit(host, port, run_id, timeout_s)
    except (RuntimeError, dist.DistStoreError) as error:
        found = {"connected": False, "error": str(error).strip().splitlines()[0]}
    print("@@ " + json.dumps(found), flush=True)


def main():
    host, port, run_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    wait_s = float(sys.argv[4]) if len(sys.argv) > 4 else 20
    attempt(host, port, run_id, timeout_s=wait_s)  # the agent may still be starting
    sys.stdin.readline()  # the launcher has put up the firewall rule
    attempt(host, port, run_id, timeout_s=3)


if __name__ == "__main__":
    main()
