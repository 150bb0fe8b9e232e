"""``llmscale completion bash|zsh|fish``: the script each shell sources, and completions it gets.

bash is run for real: the script sourced, then its completion function called as bash calls it
on <TAB>, with ``llmscale`` (this venv's) answering through argcomplete's protocol.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmscale.cli import VERBS

BIN = Path(sys.executable).parent


def _script(shell: str) -> str:
    proc = subprocess.run([str(BIN / "llmscale"), "completion", shell], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_a_script_for_llmscale(shell: str) -> None:
    text = _script(shell)
    assert "llmscale" in text and "_ARGCOMPLETE" in text


def _complete(words: list[str]) -> list[str]:
    """The COMPREPLY bash gets for ``words`` (the last one being completed)."""
    line = " ".join(words)
    code = (
        'source <(llmscale completion bash)\n'
        f'COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE="{line}"; COMP_POINT=${{#COMP_LINE}}\n'
        f'_python_argcomplete llmscale "{words[-1]}" "{words[-2]}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    bash = shutil.which("bash")
    assert bash is not None
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([bash, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return sorted(w.strip() for w in proc.stdout.splitlines() if w.strip())


def test_bash_completes_verbs() -> None:
    assert _complete(["llmscale", "sim"]) == ["simulate"]
    assert _complete(["llmscale", "ren"]) == ["render"]
    assert _complete(["llmscale", "re"]) == ["render", "report"]
    assert sorted(VERBS) == sorted(v for v in _complete(["llmscale", ""]) if not v.startswith("-"))


def test_bash_completes_flags() -> None:
    assert "--filename" in _complete(["llmscale", "render", "--f"])


def test_bash_completes_choices() -> None:
    assert _complete(["llmscale", "engine", "--gpu", "h2"]) == ["h200"]
    assert _complete(["llmscale", "engine", "--gpu", "h100-s"]) == ["h100-sxm"]
    assert _complete(["llmscale", "completion", "f"]) == ["fish"]
