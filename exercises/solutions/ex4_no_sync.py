"""Exercise 4, solved: no_sync skips the bucket hooks until the last micro-batch."""

import contextlib

from ex3_bucketed_ddp import BucketedDataParallel


class AccumulatingDataParallel(BucketedDataParallel):
    """BucketedDataParallel with a no_sync() context manager."""

    def __init__(self, module, bucket_cap_bytes):
        super().__init__(module, bucket_cap_bytes)
        self.syncing = True

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward passes accumulate into .grad and communicate nothing."""
        self.syncing = False
        try:
            yield
        finally:
            self.syncing = True

    def gradient_ready(self, param):
        # Outside no_sync, param.grad holds the sum over every micro-batch since
        # the last step: one all_reduce of it averages them all at once.
        if self.syncing:
            super().gradient_ready(param)
