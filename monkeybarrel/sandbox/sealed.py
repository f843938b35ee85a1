"""Sealed input and verdict tokens: how a trusted harness inside a run proves what it saw.

A program's exit status and output are the program's to choose, so a verdict ("the tests passed")
cannot come from them. Instead the host hands the run's *first reader* (a harness started before any
untrusted code) a sealed input: a fresh random token followed by a payload (e.g. the hidden tests).
The harness takes it (``_sealed_reader.take_sealed``, which destroys the channel), runs the untrusted
code where it cannot reach the harness, and only when every check passed writes ``<token> <verdict>``
to its stdout. The host accepts a verdict only on the line that carries the run's token; nothing
else in the run ever knew the token, so no other process can write that line.

Channels (the environment variable ``MONKEYBARREL_SEALED`` names it): local runs get an unsealed
memfd (``fd:N``, inherited down the wrapper chain; the reader truncates it, so reopening it through
``/proc`` later gives nothing), warm forks the same memfd passed to the slot's server with
``SCM_RIGHTS`` (the server never reads it), docker runs a file in the run's own ``/.sandbox-out``
(``file:PATH``, unlinked by the reader).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .layers import above_status_fd

SEALED_ENV = "MONKEYBARREL_SEALED"
READER_SOURCE = Path(__file__).with_name("_sealed_reader.py").read_text()
"""``take_sealed()``: the source harness scripts put in front of their own code."""


def new_token() -> str:
    """A fresh 128-bit token (32 hex digits)."""
    return secrets.token_hex(16)


def sealed_bytes(token: str, payload: bytes) -> bytes:
    """What the channel holds: the token line, then the payload."""
    return token.encode() + b"\n" + payload


def sealed_memfd(token: str, payload: bytes) -> int:
    """A writable memfd holding the sealed input (the reader truncates it), moved above fd 9."""
    fd = os.memfd_create("sealed")
    view = memoryview(sealed_bytes(token, payload))
    while view:
        view = view[os.write(fd, view):]
    return above_status_fd(fd)


def split_verdict(stdout: str, token: str | None) -> tuple[str, str | None]:
    """``(stdout without the token's line, the text after the token)``; the verdict is None when no
    line carries ``token`` (or no token was issued). Text before the token on its line (something
    else wrote into the same stream) does not matter: only the token's holder could write the token."""
    if token is None:
        return stdout, None
    at = stdout.find(token)
    if at < 0:
        return stdout, None
    start = stdout.rfind("\n", 0, at) + 1
    end = stdout.find("\n", at)
    end = len(stdout) if end < 0 else end
    verdict = stdout[at + len(token):end].strip()
    return stdout[:start] + stdout[end + 1:], verdict
