"""``llmscale demo``: the end-to-end demo on the local cluster (see e2e/)."""

from __future__ import annotations

import argparse

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's flags to ``parser``."""


def main(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit status."""
    print("llmscale demo: coming with the local cluster (e2e/)")
    return 0
