"""The Lighthouse gate's arithmetic (lighthouse_gate.py), without a browser."""

import pytest

from site_tests.tools import lighthouse_gate as gate


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


def run(tbt=300.0, cpu=400.0, main_thread=2000.0, dom=1500, size=200_000, accessibility=1.0):
    """One run's measurements: `cpu` is the main thread's CPU time, `main_thread` Lighthouse's
    main-thread work (wall-clock durations, times the multiplier)."""
    scores = {"performance": 0.9, "accessibility": accessibility, "best-practices": 1.0}
    return {
        "tbt": tbt,
        "main_thread": main_thread,
        "main_thread_cpu": cpu,
        "dom": dom,
        "bytes": size,
        "scores": scores,
    }


REFERENCE = run(tbt=600.0, cpu=600.0, main_thread=3000.0)


def test_a_page_as_heavy_as_the_reference_passes():
    assert gate.problems([(REFERENCE, run(tbt=600.0, cpu=600.0, main_thread=3000.0))]) == []


def test_work_stretched_by_another_process_is_not_the_pages():
    """Lighthouse's main-thread work three times the reference's, from the same CPU time (the
    core was shared while the page ran): reported, and no verdict."""
    stretched = [(REFERENCE, run(cpu=600.0, main_thread=9000.0))]
    assert gate.ratios(stretched)["main_thread"] == 3.0
    assert gate.problems(stretched) == [] and not gate.needs_another_pair(stretched)


@pytest.mark.parametrize(
    ("page", "reason"),
    [
        (
            run(cpu=600.0 * gate.RATIO_LIMIT * 1.1),
            f"main_thread_cpu {gate.RATIO_LIMIT * 1.1:.2f}x",
        ),
        (run(dom=gate.DOM_BUDGET + 1), "DOM elements"),
        (run(size=gate.BYTES_BUDGET + 1), "bytes transferred"),
        (run(accessibility=0.9), "accessibility 0.90"),
    ],
)
def test_each_limit_fails_a_page_just_past_it(page, reason):
    (found,) = gate.problems([(REFERENCE, page)])
    assert reason in found, found


def test_blocking_time_is_reported_as_a_ratio_and_not_gated():
    """Two small TBTs make no ratio (the floor); and a TBT twice the reference's, with the same
    main-thread CPU time, is shown but fails nothing."""
    reference = run(tbt=10.0)
    assert gate.ratios([(reference, run(tbt=150.0))])["tbt"] < 1
    doubled = [(REFERENCE, run(tbt=1200.0, cpu=600.0))]
    assert gate.ratios(doubled)["tbt"] == 2.0 and gate.problems(doubled) == []


def test_the_median_of_the_pairs_decides_and_one_outlier_does_not():
    pairs = [(REFERENCE, run(cpu=c)) for c in (500.0, 1800.0, 560.0)]
    assert gate.ratios(pairs)[gate.GATED] == pytest.approx(560 / 600)
    assert gate.problems(pairs) == []


def test_another_pair_only_while_the_verdict_is_open():
    light = run(tbt=3000.0, cpu=300.0)  # half the reference's CPU time
    assert not gate.needs_another_pair([(REFERENCE, light)])
    for heavier in (run(cpu=600.0 * 1.8), run(cpu=600.0 * 5)):
        assert gate.needs_another_pair([(REFERENCE, heavier)])
        assert not gate.needs_another_pair([(REFERENCE, heavier)] * gate.MAX_PAIRS)


def test_a_budget_no_cpu_changes_decides_in_one_pair():
    """5,000 extra elements fail whatever the CPU did; a page as light as the reference but
    one element over its DOM budget needs no second pair to fail."""
    pairs = [(REFERENCE, run(cpu=600.0 * 1.8, dom=gate.DOM_BUDGET + 1))]
    assert not gate.needs_another_pair(pairs) and gate.problems(pairs)
    light_but_big = [(REFERENCE, run(cpu=300.0, size=gate.BYTES_BUDGET + 1))]
    assert not gate.needs_another_pair(light_but_big) and gate.problems(light_but_big)


def test_one_noisy_pair_cannot_fail_a_page():
    """A ratio of 2.4 in the first pair (a lucky run of the reference) gets two more pairs;
    their median of 1.1 passes the page."""
    pairs = [(REFERENCE, run(cpu=600.0 * 2.4))]
    assert gate.needs_another_pair(pairs) and gate.problems(pairs)
    pairs += [(REFERENCE, run(cpu=600.0 * 1.1)), (REFERENCE, run(cpu=600.0))]
    assert not gate.needs_another_pair(pairs) and gate.problems(pairs) == []


def test_a_lone_lucky_run_of_the_reference_is_steadied_by_its_neighbours():
    references = [run(tbt=t, cpu=600.0) for t in (1000.0, 260.0, 1100.0, 1050.0)]
    steady = gate.steadied(references)
    assert [r["tbt"] for r in steady] == [630.0, 1000.0, 1050.0, 1075.0]
    assert all(r["main_thread_cpu"] == 600.0 for r in steady)
