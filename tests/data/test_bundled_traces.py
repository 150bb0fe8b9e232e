"""The traces that ship inside the package: found through importlib.resources, as the registry
describes them, and credited in the package README, the NOTICE and every tool's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmscale.data
from llmscale.data import (
    BUNDLED_TRACES,
    DEFAULT_TRACE,
    bundled_trace_for,
    resolve_trace,
    trace_path,
)
from llmscale.sim.trace import TRACE_CITATION, load_azure_csv

ROOT = Path(__file__).resolve().parents[2]
TRACES = [pytest.param(name, id=name) for name in BUNDLED_TRACES]


def test_the_registry_holds_both_traces() -> None:
    assert set(BUNDLED_TRACES) == {"azure-llm-2023-conv", "mooncake-conversation"}
    assert BUNDLED_TRACES["azure-llm-2023-conv"].attribution == TRACE_CITATION


def test_the_default_trace_is_azures() -> None:
    assert DEFAULT_TRACE == "azure-llm-2023-conv"
    assert BUNDLED_TRACES[DEFAULT_TRACE].format == "azure-csv"


@pytest.mark.parametrize("name", TRACES)
def test_each_trace_is_a_packaged_file_inside_llmscale(name: str) -> None:
    path = trace_path(name)
    assert path.is_file() and path.stat().st_size > 100_000
    assert path.name == BUNDLED_TRACES[name].filename
    # Package data of llmscale.data, not a file found next to the repository.
    assert path.parent.parent == Path(llmscale.data.__file__).parent


def test_the_azure_trace_matches_its_registry_entry() -> None:
    entry = BUNDLED_TRACES["azure-llm-2023-conv"]
    t = load_azure_csv(trace_path(entry.name))
    assert len(t) == entry.requests == 19_366
    assert t.duration_s == pytest.approx(entry.duration_s, abs=1e-6)
    assert t.source == entry.filename


def test_the_mooncake_trace_matches_its_registry_entry() -> None:
    entry = BUNDLED_TRACES["mooncake-conversation"]
    rows = [json.loads(line) for line in trace_path(entry.name).read_text(encoding="utf-8").splitlines() if line]
    assert len(rows) == entry.requests == 12_031
    assert {"timestamp", "input_length", "output_length", "hash_ids"} <= set(rows[0])
    assert (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000 == pytest.approx(entry.duration_s)


@pytest.mark.parametrize("name", TRACES)
def test_each_trace_carries_its_attribution_everywhere(name: str) -> None:
    entry = BUNDLED_TRACES[name]
    assert entry.licence in {"CC-BY-4.0", "Apache-2.0"}
    short_title = entry.citation.split('"')[1].split(":")[0]  # "Splitwise", "Mooncake"
    assert short_title in entry.attribution
    readme = (trace_path(name).parent / "README.md").read_text(encoding="utf-8")
    notice = (ROOT / "NOTICE").read_text(encoding="utf-8")
    for text in (readme, notice):
        assert entry.filename in text
        assert short_title in text
        assert {"CC-BY-4.0": "CC-BY 4.0", "Apache-2.0": "Apache License"}[entry.licence] in text


def test_an_unknown_name_lists_the_bundled_ones() -> None:
    with pytest.raises(KeyError, match="azure-llm-2023-conv"):
        trace_path("azure-2024")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, "bundled:azure-llm-2023-conv", id="default"),
        pytest.param("mooncake-conversation", "bundled:mooncake-conversation", id="bundled-name"),
        pytest.param("my/trace.csv", "path:my/trace.csv", id="a-path-string"),
        pytest.param(Path("azure-llm-2023-conv"), "path:azure-llm-2023-conv", id="a-Path-is-never-a-name"),
    ],
)
def test_resolve_trace(value: str | Path | None, expected: str) -> None:
    kind, _, rest = expected.partition(":")
    want = trace_path(rest) if kind == "bundled" else Path(rest)
    assert resolve_trace(value) == want


def test_a_copy_of_a_bundled_trace_is_recognised_by_its_file_name(tmp_path: Path) -> None:
    assert bundled_trace_for(tmp_path / "azure-llm-2023-conv.csv") is BUNDLED_TRACES["azure-llm-2023-conv"]
    assert bundled_trace_for("elsewhere/mooncake-conversation-trace.jsonl") is BUNDLED_TRACES["mooncake-conversation"]
    assert bundled_trace_for(tmp_path / "mine.csv") is None
