"""A clone stands on its own: no tracked file reads or mentions the reference folder that sits
beside the repository on the developers' machines (a user's clone has no such folder)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(re.escape("../" + "shared") + "|" + re.escape("shared" + "/traces"))


def tracked_files() -> list[Path]:
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    return [ROOT / name for name in proc.stdout.decode().split("\0") if name]


def test_the_file_list_is_the_repository() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in tracked_files()}
    assert {"pyproject.toml", "README.md", "LICENSE", "NOTICE", "operator/llmscale/data/traces/README.md"} <= names


def test_no_tracked_file_mentions_the_folder_beside_the_repository() -> None:
    hits = []
    for path in tracked_files():
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary (PNG)
        for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert hits == [], "\n".join(hits)
