"""Exercise 1: ring all-reduce by hand.

Write ring_all_reduce(tensor): sum `tensor` over every rank, in place, using only
point-to-point messages (dist.send / dist.recv, or dist.isend / dist.irecv). Grade it with

    python -m pytest test_ex1_ring_all_reduce.py

The ring is rank r -> rank r+1 (mod p). Cut the tensor into p chunks (the length need not
divide by p: torch.tensor_split makes chunks that differ by one element at most), then:

1. reduce-scatter, p-1 steps: at step s rank r sends chunk (r - s) mod p to its right-hand
   neighbour and adds the chunk (r - s - 1) mod p it receives from its left into its own copy;
   afterwards rank r holds the complete sum of chunk (r + 1) mod p;
2. all-gather, p-1 steps: at step s rank r sends chunk (r + 1 - s) mod p, complete, and
   overwrites its copy of the chunk (r - s) mod p it receives.

Each rank then has sent 2(p-1) chunks: 2(p-1)/p of the tensor, whatever p is.
"""

import torch
import torch.distributed as dist  # noqa: F401  (your code will use it)


def ring_all_reduce(tensor):
    """Replace `tensor` on every rank by the elementwise sum of all ranks' tensors."""
    # TODO: cut `tensor` into p chunks that are views of it, so that writing a chunk
    #       writes the tensor.
    # TODO: run the two phases. If every rank calls a blocking dist.send first, every rank
    #       waits for a receiver that never comes: start the send with dist.isend, receive
    #       with dist.recv, then wait for the send.
    raise NotImplementedError("exercise 1: write ring_all_reduce with sends and receives")


if __name__ == "__main__":
    from ranks import run_ranks

    def show(rank, world_size):
        tensor = torch.full((5,), float(rank + 1))
        ring_all_reduce(tensor)
        return tensor.tolist()

    print(run_ranks(show, 3, "exercise 1's ring_all_reduce"))
