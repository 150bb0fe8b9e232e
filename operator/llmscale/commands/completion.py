"""``llmscale completion bash|zsh|fish``: print the shell's completion script (argcomplete).

Examples::

    source <(llmscale completion bash)                          # this shell; add it to ~/.bashrc
    llmscale completion zsh > "${fpath[1]}/_llmscale"           # zsh (or: source <(llmscale completion zsh))
    llmscale completion fish > ~/.config/fish/completions/llmscale.fish

The script asks ``llmscale`` itself for the completions (argcomplete's protocol: the
``_ARGCOMPLETE`` variable), so verbs, flags and their choices (presets, policies, formats) are
always those of the installed version. Exit status: 0.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["SHELLS", "add_arguments", "main"]

SHELLS = ("bash", "zsh", "fish")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the shell argument of ``llmscale completion`` to ``parser``."""
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in: bash, zsh or fish")


def main(args: argparse.Namespace) -> int:
    """Print the completion script of ``args.shell``; return 0."""
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["llmscale"], shell=args.shell))
    return 0
