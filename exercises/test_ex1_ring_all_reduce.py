"""Exercise 1's tests: ring_all_reduce against dist.all_reduce, and the bytes it sends.

Each ring size runs once, on real gloo ranks; the tests read what the ranks reported.
"""

from fractions import Fraction

import pytest
import torch
import torch.distributed as dist
from ranks import load_exercise, run_ranks

exercise = load_exercise("ex1_ring_all_reduce")

RING_SIZES = (2, 3, 4)
LENGTHS = (12, 10, 7)  # 12 divides by every ring size; 10 and 7 do not divide by 3 or 4


def ring_worker(rank, world_size):
    """Per length: this rank's input, the ring's answer, torch's answer, the bytes sent."""
    all_reduce, sent = dist.all_reduce, []

    def counted(send):
        def wrapper(tensor, *args, **kwargs):
            sent.append(tensor.numel() * tensor.element_size())
            return send(tensor, *args, **kwargs)

        return wrapper

    def refuse(*args, **kwargs):
        raise AssertionError("exercise 1: use sends and receives, not torch's collectives")

    cases = []
    for length in LENGTHS:
        # Small integers in float32: every partial sum is exact, in any order.
        generator = torch.Generator().manual_seed(100 * rank + length)
        tensor = torch.randint(-50, 50, (length,), generator=generator).float()
        expected = tensor.clone()
        all_reduce(expected)
        sent.clear()
        patched = {"send": counted(dist.send), "isend": counted(dist.isend)}
        patched |= {name: refuse for name in ("all_reduce", "reduce_scatter", "all_gather")}
        saved = {name: getattr(dist, name) for name in patched}
        for name, function in patched.items():
            setattr(dist, name, function)
        try:
            ring = tensor.clone()
            exercise.ring_all_reduce(ring)
        finally:
            for name, function in saved.items():
                setattr(dist, name, function)
        cases.append({"length": length, "ring": ring, "expected": expected, "sent": sum(sent)})
    return cases


@pytest.fixture(scope="module")
def runs():
    return {
        p: run_ranks(ring_worker, p, "exercise 1's ring_all_reduce", hang="a rank did not send")
        for p in RING_SIZES
    }


@pytest.mark.parametrize("p", RING_SIZES)
def test_every_rank_holds_the_sum(runs, p):
    for rank, cases in enumerate(runs[p]):
        for case in cases:
            wrong = (case["ring"] != case["expected"]).nonzero().flatten().tolist()
            assert not wrong, (
                f"with p = {p} and {case['length']} elements, rank {rank}'s result differs "
                f"from dist.all_reduce's at indices {wrong}"
            )


@pytest.mark.parametrize("p", RING_SIZES)
def test_each_rank_sends_2_p_minus_1_over_p_of_the_tensor(runs, p):
    for case_index, length in enumerate(LENGTHS):
        tensor_bytes = length * 4  # float32
        share = 2 * Fraction(p - 1, p) * tensor_bytes
        sent = [cases[case_index]["sent"] for cases in runs[p]]
        if length % p == 0:
            for rank, count in enumerate(sent):
                assert count == share, (
                    f"with p = {p} and {length} elements, rank {rank} sent {count} bytes; "
                    f"the ring sends 2(p-1)/p of the tensor, {share} bytes"
                )
        else:
            # Chunks differ by an element, so ranks differ a little; their mean may not.
            assert Fraction(sum(sent), p) == share, (
                f"with p = {p} and {length} elements, the ranks sent {sent} bytes, "
                f"{float(Fraction(sum(sent), p)):g} on average; the ring sends 2(p-1)/p of "
                f"the tensor, {float(share):g} bytes"
            )
            for rank, count in enumerate(sent):
                assert abs(count - share) < 2 * 4, (
                    f"with p = {p} and {length} elements, rank {rank} sent {count} bytes, "
                    f"more than two elements away from {float(share):g}"
                )
