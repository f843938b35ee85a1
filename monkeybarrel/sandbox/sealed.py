"""Sealed input and verdict tokens: how a trusted harness inside a run proves what it saw.

A program's exit status and output are the program's to choose, so a verdict ("the tests passed")
cannot come from them. Instead the host hands the run's *first reader* (a harness started before any
untrusted code) a sealed input: a fresh random token followed by a payload (e.g. the hidden tests).
The harness takes it (``_sealed_reader.take_sealed``, which destroys the channel), runs the untrusted
code where it cannot reach the harness, and only when every check passed writes
``attest(token, verdict)`` - the verdict after its HMAC-SHA256 under the token - to its stdout. The
host accepts a verdict only on a line whose MAC checks; nothing else in the run ever knew the token,
so no other process can write such a line, and one that reads it back out of the pipe can only
repeat it (the token is never written).

Channels (the environment variable ``MONKEYBARREL_SEALED`` names it): local runs get an unsealed
memfd (``fd:N``, inherited down the wrapper chain; the reader truncates it, so reopening it through
``/proc`` later gives nothing), warm forks the same memfd passed to the slot's server with
``SCM_RIGHTS`` (the server never reads it), docker runs a file in the run's own ``/.sandbox-out``
(``file:PATH``, unlinked by the reader).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
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


_ATTESTED = re.compile(r"([0-9a-f]{64}) ([^\n]*)")


def split_verdict(stdout: str, token: str | None) -> tuple[str, str | None]:
    """``(stdout without the attested line, the verdict)``; the verdict is None when no line carries a
    valid HMAC under ``token`` (or no token was issued). Only the token's holder can write such a line;
    one that read it back out of the pipe can only repeat it. Text before the MAC on its line (another
    process wrote into the same stream) does not matter."""
    if token is None:
        return stdout, None
    key = token.encode("ascii")
    for match in _ATTESTED.finditer(stdout):
        mac, verdict = match.groups()
        expected = hmac.new(key, verdict.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()
        if hmac.compare_digest(mac, expected):
            start = stdout.rfind("\n", 0, match.start()) + 1
            end = match.end() + (1 if stdout[match.end():match.end() + 1] == "\n" else 0)
            return stdout[:start] + stdout[end:], verdict
    return stdout, None
