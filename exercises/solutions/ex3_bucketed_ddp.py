"""Exercise 3, solved: buckets filled by gradient hooks, reduced while backward runs."""

import torch
import torch.distributed as dist


def at_end_of_backward(callback):
    """Have autograd call `callback()` once the backward pass now running has finished.

    Call it from inside a hook. torch's DDP uses this same (private) engine call.
    """
    torch.autograd.Variable._execution_engine.queue_callback(callback)


def plan_buckets(params, bucket_cap_bytes):
    """Parameters in reverse order, cut into lists of at most bucket_cap_bytes each.

    A parameter bigger than the cap gets a list of its own. A list holds one dtype on one
    device, since it becomes one flat buffer: a parameter of another starts a new list.
    """
    buckets, current, size = [], [], 0
    for param in reversed(params):
        nbytes = param.numel() * param.element_size()
        if current and (
            size + nbytes > bucket_cap_bytes
            or (param.dtype, param.device) != (current[0].dtype, current[0].device)
        ):
            buckets.append(current)
            current, size = [], 0
        current.append(param)
        size += nbytes
    return buckets + [current] if current else buckets


class Bucket:
    """Some parameters, one flat buffer for their gradients, and its all_reduce."""

    def __init__(self, params):
        self.params = params
        first = params[0]  # plan_buckets gave every parameter here its dtype and device
        numel = sum(p.numel() for p in params)
        self.buffer = torch.zeros(numel, dtype=first.dtype, device=first.device)
        sizes = [p.numel() for p in params]
        self.slices = dict(zip(params, self.buffer.split(sizes), strict=True))
        self.ready = 0
        self.work = None

    def add(self, param):
        """Copy param's gradient in; launch the all_reduce if it was the last one."""
        self.slices[param].copy_(param.grad.flatten())
        self.ready += 1
        if self.ready == len(self.params):
            self.work = dist.all_reduce(self.buffer, async_op=True)

    def finish(self, world_size):
        if self.work is None:
            raise RuntimeError("a bucket never filled: is a parameter unused?")
        self.work.wait()
        self.buffer /= world_size  # all_reduce summed; the mean is what training needs
        for param, flat in self.slices.items():
            param.grad.copy_(flat.view_as(param))
        self.ready, self.work = 0, None


class BucketedDataParallel(torch.nn.Module):
    """Averages gradients over the ranks, one asynchronous all_reduce per bucket."""

    def __init__(self, module, bucket_cap_bytes):
        super().__init__()
        self.module = module
        with torch.no_grad():  # every rank starts from rank 0's state, frozen parts too
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor, src=0)
        # module.parameters() lists a tied weight once; a frozen one never gets a gradient.
        params = [p for p in module.parameters() if p.requires_grad]
        groups = plan_buckets(params, bucket_cap_bytes)
        self.buckets = [Bucket(group) for group in groups]
        self.bucket_of = {p: bucket for bucket in self.buckets for p in bucket.params}
        self.finish_queued = False
        for param in params:
            param.register_post_accumulate_grad_hook(self.gradient_ready)

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def gradient_ready(self, param):
        """Autograd calls this when param.grad is complete."""
        if not self.finish_queued:
            at_end_of_backward(self.finish)
            self.finish_queued = True
        self.bucket_of[param].add(param)

    def finish(self):
        """Autograd calls this at the end of backward: wait, average, copy back."""
        self.finish_queued = False
        for bucket in self.buckets:
            bucket.finish(dist.get_world_size())
