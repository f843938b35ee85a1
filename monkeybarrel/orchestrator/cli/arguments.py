"""Argument parsing shared by the subcommands: errors on one line, argument types."""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """``argparse`` with its errors on one line (``error: monkeybarrel show: argument --limit: ...``), exit 2."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (`{self.prog} -h` lists the options)\n")


def positive_int(text: str) -> int:
    """An argument that must be an integer >= 1 (``--limit``, ``--attempts``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value
