"""llmscale.timestamps: the one RFC 3339 grammar, for metav1.Time, Kopf's peering lastseen and the
deadline annotation (the strict reader) and the operator's lenient one (llmscale.controller.state.timestamps)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.controller.state import timestamps as lenient
from llmscale.timestamps import parse_rfc3339, rfc3339

T = datetime(2025, 1, 6, 6, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("2025-01-06T06:00:00Z", T, id="Z"),
        pytest.param("2025-01-06t06:00:00z", T, id="lower-case t and z"),
        pytest.param("2025-01-06 06:00:00Z", T, id="space for T"),
        pytest.param("2025-01-06T07:00:00+01:00", T, id="offset"),
        pytest.param("2025-01-06T01:00:00-05:00", T, id="negative offset"),
        pytest.param("2025-01-06T06:00:00.250Z", T + 0.25, id="fraction"),
        pytest.param("  2025-01-06T06:00:00Z \n", T, id="blanks"),
    ],
)
def test_rfc3339_date_times(text: str, seconds: float) -> None:
    assert parse_rfc3339(text) == pytest.approx(seconds)
    assert lenient.parse_rfc3339(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("2025-01-06T06:00:00", "no UTC offset", id="no offset"),
        pytest.param("2025-01-06", "no UTC offset", id="date only"),
        pytest.param("2025-01-06T06:00Z", "is not YYYY-MM-DD", id="no seconds"),
        pytest.param("20250106T060000Z", "is not YYYY-MM-DD", id="ISO 8601 basic format"),
        pytest.param("2025-W02-1T06:00:00Z", "is not YYYY-MM-DD", id="week date"),
        pytest.param("2025-01-06T06:00:00+0100", "is not YYYY-MM-DD", id="offset without colon"),
        pytest.param("tomorrow", "is not YYYY-MM-DD", id="words"),
        pytest.param("", "is not YYYY-MM-DD", id="empty"),
        pytest.param("2025-13-06T06:00:00Z", "month", id="month 13"),
        pytest.param("2025-02-30T06:00:00Z", "day", id="30 February"),
        pytest.param("0001-01-01T00:00:00+01:00", "before 1970", id="year 1"),
        pytest.param("9999-12-31T23:59:59Z", "after 9000", id="year 9999"),
    ],
)
def test_what_is_not_rfc3339_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rfc3339(text)


def test_a_naive_time_is_read_as_utc_when_asked_never_in_the_hosts_zone() -> None:
    # Kopf writes its peering lastseen from datetime.utcnow(): no offset.
    assert parse_rfc3339("2025-01-06T06:00:00", naive_is_utc=True) == T
    assert lenient.parse_rfc3339("2025-01-06T06:00:00") == T


@pytest.mark.parametrize("value", ["not a time", "", None, 5, "2025-01-06T06:00Z", "9999-12-31T23:59:59Z"])
def test_the_lenient_reader_never_raises(value: object) -> None:
    assert lenient.parse_rfc3339(value) is None


@given(st.integers(min_value=0, max_value=200_000_000_000))
def test_what_we_write_we_read_back(seconds: int) -> None:
    assert parse_rfc3339(rfc3339(seconds)) == seconds
