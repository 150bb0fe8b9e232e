"""Small synthetic traces in the two real formats, for tests that must not depend on data from
outside the repository: an hour of Azure-format CSV and an hour of Mooncake-format JSONL whose
prompts share leading blocks."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

__all__ = ["write_fixture_traces"]


def write_fixture_traces(folder: Path, azure_name: str, mooncake_name: str, seed: int = 0) -> tuple[Path, Path]:
    """Write both files into ``folder`` under the given names; return their paths.

    Azure: 5,000 Poisson arrivals over an hour from 2023-11-16 18:00 UTC, log-normal prompts
    (median ~900 tokens) and outputs (median ~150). Mooncake: 2,500 arrivals over an hour, prompts
    of 2–23 blocks of 512 tokens, each starting with a run of blocks shared with earlier prompts.
    """
    rng = np.random.default_rng(seed)
    n = 5000
    t = np.sort(rng.uniform(0, 3600, n))
    t0 = datetime(2023, 11, 16, 18, 0, tzinfo=UTC).timestamp()
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    prompts = np.clip(rng.lognormal(6.8, 0.8, n), 10, 7000)
    outputs = np.clip(rng.lognormal(5, 0.8, n), 1, 1000)
    for ts, p, o in zip(t, prompts, outputs, strict=True):
        stamp = datetime.fromtimestamp(t0 + ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        lines.append(f"{stamp},{int(p)},{int(o)}")
    azure = folder / azure_name
    azure.write_text("\n".join(lines) + "\n", encoding="utf-8")
    m = 2500
    tm = np.sort(rng.uniform(0, 3_600_000, m)).astype(int)
    rows = []
    next_id = 1000
    for ts in tm:
        blocks = int(rng.integers(2, 24))
        shared = int(rng.integers(0, blocks))
        ids = list(range(shared)) + list(range(next_id, next_id + blocks - shared))
        next_id += blocks - shared
        rows.append(json.dumps({"timestamp": int(ts), "input_length": blocks * 512 - int(rng.integers(0, 511)),
                                "output_length": int(rng.integers(5, 400)), "hash_ids": ids}))
    mooncake = folder / mooncake_name
    mooncake.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return azure, mooncake
