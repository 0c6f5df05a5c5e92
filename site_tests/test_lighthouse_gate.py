"""The Lighthouse gate's arithmetic (lighthouse_gate.py), without a browser."""

import pytest

from site_tests import lighthouse_gate as gate


@pytest.mark.parametrize(
    ("index", "multiplier"),
    # Lighthouse's calibration: its default 4x is right for a host of about 1,533
    [(100, 1.0), (150, 1.0), (475, 1.5), (800, 2.0), (1300, 3.0), (1533, 4.0), (2000, 6.0)],
)
def test_the_multiplier_follows_lighthouses_calibration(index, multiplier):
    assert gate.calibrated_multiplier(index) == pytest.approx(multiplier, abs=0.01)


def test_a_slower_host_gets_a_smaller_multiplier():
    indexes = range(100, 2500, 50)
    multipliers = [gate.calibrated_multiplier(index) for index in indexes]
    assert multipliers == sorted(multipliers) and len(set(multipliers)) > 30


def run(tbt=300.0, main_thread=2000.0, dom=1500, size=200_000, accessibility=1.0):
    scores = {"performance": 0.9, "accessibility": accessibility, "best-practices": 1.0}
    return {"tbt": tbt, "main_thread": main_thread, "dom": dom, "bytes": size, "scores": scores}


REFERENCE = run(tbt=600.0, main_thread=3000.0)


def test_a_page_as_heavy_as_the_reference_passes():
    assert gate.problems([(REFERENCE, run(tbt=600.0, main_thread=3000.0))]) == []


@pytest.mark.parametrize(
    ("page", "reason"),
    [
        (run(tbt=600.0 * 1.6), "tbt 1.60x"),
        (run(main_thread=3000.0 * 1.6), "main_thread 1.60x"),
        (run(dom=gate.DOM_BUDGET + 1), "DOM elements"),
        (run(size=gate.BYTES_BUDGET + 1), "bytes transferred"),
        (run(accessibility=0.9), "accessibility 0.90"),
    ],
)
def test_each_limit_fails_a_page_just_past_it(page, reason):
    (found,) = gate.problems([(REFERENCE, page)])
    assert reason in found, found


def test_a_reference_with_almost_no_blocking_time_counts_as_the_floor():
    """Two small TBTs make no ratio: 150 ms beside 10 ms is no failure."""
    reference = run(tbt=10.0)
    assert gate.ratios([(reference, run(tbt=150.0))])["tbt"] < 1
    assert gate.problems([(reference, run(tbt=gate.TBT_FLOOR_MS * 1.6))])


def test_the_median_of_the_pairs_decides_and_one_outlier_does_not():
    pairs = [(REFERENCE, run(tbt=t)) for t in (500.0, 2000.0, 550.0)]
    assert gate.ratios(pairs)["tbt"] == pytest.approx(550 / 600)
    assert gate.problems(pairs) == []


def test_another_pair_only_while_the_verdict_is_open():
    light = run(tbt=300.0, main_thread=1500.0)  # half the reference's
    assert not gate.needs_another_pair([(REFERENCE, light)])
    for heavier in (run(tbt=900.0), run(tbt=600.0 * 5), run(main_thread=3000.0 * 1.3)):
        assert gate.needs_another_pair([(REFERENCE, heavier)])
        assert not gate.needs_another_pair([(REFERENCE, heavier)] * gate.MAX_PAIRS)


def test_one_noisy_pair_cannot_fail_a_page():
    """A ratio of 4.2 in the first pair (a lucky run of the reference, as one CI rehearsal saw)
    gets two more pairs; their median of 1.1 passes the page."""
    pairs = [(REFERENCE, run(tbt=600.0 * 4.2))]
    assert gate.needs_another_pair(pairs) and gate.problems(pairs)
    pairs += [(REFERENCE, run(tbt=600.0 * 1.1)), (REFERENCE, run(tbt=600.0 * 1.0))]
    assert not gate.needs_another_pair(pairs) and gate.problems(pairs) == []


def test_a_lone_lucky_run_of_the_reference_is_steadied_by_its_neighbours():
    references = [run(tbt=t, main_thread=3000.0) for t in (1000.0, 260.0, 1100.0, 1050.0)]
    steady = gate.steadied(references)
    assert [r["tbt"] for r in steady] == [630.0, 1000.0, 1050.0, 1075.0]
    assert all(r["main_thread"] == 3000.0 for r in steady)
