"""Exercise 3: bucketed, overlapped DDP.

Data parallelism the way torch's DDP does it: buckets, hooks, and communication that
overlaps backward.

Write BucketedDataParallel(module, bucket_cap_bytes). Training with it looks like training
with torch's DDP: no extra call after backward.

    model = BucketedDataParallel(module, bucket_cap_bytes=1000)
    loss_fn(model(x), y).backward()     # on return, every .grad is the mean over the ranks

Grade it with

    python -m pytest test_ex3_bucketed_ddp.py

How it works:
- The constructor broadcasts rank 0's parameters, frozen ones too, and buffers: the ranks
  may have built their models from different seeds.
- plan_buckets cuts the trainable parameters (requires_grad; module.parameters() lists a
  tied weight once) into buckets, in reverse order (roughly the order backward produces
  their gradients). A bucket takes parameters until the next one would push it past
  bucket_cap_bytes or has another dtype; a parameter bigger than the cap gets a bucket of
  its own. Each bucket owns one flat buffer for its parameters' gradients, of their dtype,
  on their device.
- Every trainable parameter gets a hook, register_post_accumulate_grad_hook(self.gradient_ready),
  which autograd calls as soon as that parameter's .grad is complete. The hook copies the
  gradient into its bucket's buffer; when the last gradient of a bucket arrives, it launches
  dist.all_reduce(buffer, async_op=True) and moves on, so the sum travels while autograd is
  still computing the other gradients.
- The first hook of a backward also asks autograd to call self.finish at the end of that
  backward (at_end_of_backward, below). finish waits for every bucket's all_reduce, turns
  the sums into means, and copies them back into the parameters' .grad.

Exercise 4 builds on this class: keep the hook in a method named gradient_ready.
"""

import torch
import torch.distributed as dist  # noqa: F401  (your code will use it)


def at_end_of_backward(callback):
    """Have autograd call `callback()` once the backward pass now running has finished.

    Call it from inside a hook. torch's DDP uses this same (private) engine call.
    """
    torch.autograd.Variable._execution_engine.queue_callback(callback)


def plan_buckets(params, bucket_cap_bytes):
    """Lists of parameters, one list per bucket, by the rule in the module's docstring."""
    # TODO: walk reversed(params); a parameter's size in bytes is
    #       param.numel() * param.element_size().
    raise NotImplementedError("exercise 3: write plan_buckets")


class BucketedDataParallel(torch.nn.Module):
    """Averages gradients over the ranks, one asynchronous all_reduce per bucket."""

    def __init__(self, module, bucket_cap_bytes):
        super().__init__()
        self.module = module
        # TODO: broadcast rank 0's parameters and buffers; plan the buckets and give each
        #       a flat buffer; register self.gradient_ready on every parameter that
        #       requires grad.
        raise NotImplementedError("exercise 3: build the buckets and register the hooks")

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def gradient_ready(self, param):
        """Autograd calls this when param.grad is complete."""
        # TODO: on the first call of a backward, at_end_of_backward(self.finish).
        # TODO: copy param.grad into its bucket; launch the bucket's all_reduce when full.
        raise NotImplementedError("exercise 3: copy the gradient into its bucket")

    def finish(self):
        """Autograd calls this at the end of backward: wait, average, copy back."""
        # TODO: wait for every bucket's all_reduce, divide by the world size, copy each
        #       slice of the buffer back into its parameter's .grad, reset for next time.
        raise NotImplementedError("exercise 3: wait for the buckets at the end of backward")
