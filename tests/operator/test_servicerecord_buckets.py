"""The service record's rolling buckets (issue 14: a ring of flat arrays instead of a dict of one
array per bucket) sum exactly as the dict did, for the minute and the hour buckets."""

from __future__ import annotations

import pytest
from benchmarks.memory_per_object import DictBuckets  # the rule before issue 14, kept as the reference
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.controller.state.servicerecord import _FIELDS, _GPU_S, _Buckets

T0 = 1_790_000_000.0


@settings(max_examples=200, deadline=None)
@given(
    shape=st.sampled_from([(60.0, 60), (3600.0, 24), (60.0, 3)]),
    steps=st.lists(
        st.tuples(
            st.one_of(st.floats(0, 120), st.floats(0, 7200), st.floats(-50, 0)),  # mostly forward, a little late
            st.integers(0, _FIELDS - 1),
            st.floats(0, 1000),
        ),
        min_size=1, max_size=300,
    ),
)
def test_ring_sums_as_the_dict(shape: tuple[float, int], steps: list[tuple[float, int, float]]) -> None:
    width, count = shape
    ring, reference = _Buckets(width, count), DictBuckets(width, count)
    now = newest = T0
    for dt, index, value in steps:
        now += dt
        ring.add(now, index, value)
        reference.add(now, index, value)
        newest = max(newest, now)
        # Read at the newest time, as the tick does (its clock moves forward).
        # Equal up to the order of the additions (slot order against creation order).
        assert ring.sums(newest) == pytest.approx(reference.sums(newest), rel=1e-12, abs=1e-9)
        low = newest - 3 * width
        assert ring.field_sum(_GPU_S, low, newest) == pytest.approx(sum(
            b[_GPU_S] for k, b in reference.data.items() if low <= k <= newest), rel=1e-12, abs=1e-9)


def test_a_ring_costs_the_same_however_old() -> None:
    ring = _Buckets(60.0, 60)
    for minute in range(3 * 60):
        ring.add(T0 + 60 * minute, _GPU_S, 1.0)
    assert len(ring.keys) == 60 and len(ring.values) == 60 * _FIELDS
    assert ring.sums(T0 + 60 * 179)[_GPU_S] == 60.0
