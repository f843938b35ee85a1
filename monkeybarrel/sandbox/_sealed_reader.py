"""Reads a run's sealed input inside the sandbox (standard library only; its source is put in front of
the harness scripts that need it, see ``sealed.py``; not imported by the package).

``take_sealed()`` returns ``(token, payload)`` and destroys the channel: a memfd (``fd:N``) is read
from its start and truncated to nothing, a file (``file:PATH``) is read and unlinked. Call it before
any untrusted code exists in the run: afterwards no process of the run, nor any process that
reopens the channel through ``/proc``, can read the token again.

``attest(token, verdict)`` is the line to write for the host: the verdict after its HMAC-SHA256
under the token. The token itself is never written, so a process that reads the line back out of
the output pipe learns nothing it could use to write another verdict.
"""

import hashlib
import hmac
import os

SEALED_ENV = "MONKEYBARREL_SEALED"


def take_sealed():
    where = os.environ.pop(SEALED_ENV, "")
    kind, _, ref = where.partition(":")
    if kind == "fd":
        fd = int(ref)
        chunks, offset = [], 0
        while True:
            chunk = os.pread(fd, 1 << 20, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        os.ftruncate(fd, 0)
        os.close(fd)
        data = b"".join(chunks)
    elif kind == "file":
        with open(ref, "rb") as handle:
            data = handle.read()
        os.unlink(ref)
    else:
        raise RuntimeError(f"no sealed input (${SEALED_ENV} is {where!r})")
    token, _, payload = data.partition(b"\n")
    return token.decode("ascii"), payload


def attest(token, verdict):
    mac = hmac.new(token.encode("ascii"), verdict.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"\n{mac} {verdict}\n"
