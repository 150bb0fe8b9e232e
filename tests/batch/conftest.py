"""Fixtures of the batch client tests: a real mock engine (``llmscale engine``) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.engine.conftest import Engine, run_engine


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """Llama-3.1-8B on one H100 at five times real time: a 200-token completion takes ~0.3 s."""
    with run_engine(
        tmp_path_factory.mktemp("engine"),
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--time-scale",
        "5",
        "--max-model-len",
        "4096",
    ) as e:
        yield e
