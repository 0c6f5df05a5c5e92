"""Exercise 1, solved: ring all-reduce with point-to-point sends and receives."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    """Replace `tensor` on every rank by the elementwise sum of all ranks' tensors."""
    rank, p = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor, p)  # views: updating a chunk updates the tensor
    for step in range(p - 1):  # reduce-scatter: add what the left neighbour sends
        incoming = chunks[(rank - step - 1) % p]
        incoming.add_(pass_right(chunks[(rank - step) % p], incoming))
    for step in range(p - 1):  # all-gather: pass the complete chunks around the ring
        incoming = chunks[(rank - step) % p]
        incoming.copy_(pass_right(chunks[(rank + 1 - step) % p], incoming))


def pass_right(outgoing, incoming):
    """Send `outgoing` to the right; return what the left sends, shaped like `incoming`.

    The send is started first and waited for last: if every rank blocked in a send,
    no rank would be left to receive.
    """
    rank, p = dist.get_rank(), dist.get_world_size()
    sending = dist.isend(outgoing, dst=(rank + 1) % p)
    received = torch.empty_like(incoming)
    dist.recv(received, src=(rank - 1) % p)
    sending.wait()
    return received
