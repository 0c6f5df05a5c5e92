"""The labs' timing helpers (code/ddp/ddp_common.py), on CPU: the NCCL lab's sweep uses them.

The sweep all-reduces one buffer in place, call after call; its values must not grow. Its
ceiling, a memory copy, must count bytes the way busbw does, or the two are not comparable.
"""

import sys

import pytest
import torch
import torch.distributed as dist

from site_tests.conftest import ROOT

sys.path[:0] = [str(ROOT / "code" / "ddp"), str(ROOT / "code")]  # as the lab scripts do
import ddp_common as lab  # noqa: E402

CPU = torch.device("cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_swept_buffer_stays_finite_however_often_it_is_reduced(
    one_rank_group, monkeypatch, dtype
):
    """A SUM over two ranks holding equal values doubles them: as the NCCL lab's 2 GPUs do."""
    all_reduce, seen = dist.all_reduce, []

    def two_ranks(tensor, *args, **kwargs):
        if args or "op" in kwargs:  # slowest_rank's MAX: the real one-rank call
            return all_reduce(tensor, *args, **kwargs)
        tensor.mul_(2)
        seen.append(tensor.float().abs().max().item())
        return None

    monkeypatch.setattr(dist, "all_reduce", two_ranks)
    lab.time_all_reduce(4096, CPU, lambda: None, dtype, warmup=2, reps=7, iters=20)
    assert len(seen) == 2 + 7 * 20, "as many calls as the NCCL lab's small sizes make"
    assert all(value == seen[0] for value in seen), f"the values grew: {seen[0]} to {seen[-1]}"


def test_the_memory_copy_counts_bytes_as_busbw_does():
    copy = lab.time_memcpy(1 << 20, CPU, lambda: None)
    assert copy["GBps"] == pytest.approx((1 << 20) / copy["seconds"] / 1e9)
    # At p = 2 busbw is algbw: an all_reduce as slow as the copy has the copy's figure.
    as_slow = lab.bandwidth(1 << 20, copy["seconds"], world_size=2)
    assert as_slow["busbw_GBps"] == pytest.approx(copy["GBps"])
