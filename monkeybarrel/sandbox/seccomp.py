"""The seccomp filter of every local run: no kernel keyrings (``add_key``, ``request_key``, ``keyctl`` fail
with ENOSYS).

Keys are not in any namespace a run gets: the kernel keeps them per uid (and user namespace), and a
key a run links into its user, user-session or persistent keyring outlives the run, where any later
run of the same uid (a sandbox slot's own, a warm slot's) can read it, and ``/proc/keys`` shows its
description even across user namespaces. Docker's default seccomp profile blocks the same three calls
for the same reason. Programs see "no keyring support", which every keyring user handles.

The filter is classic BPF (an array of ``struct sock_filter``), the form bubblewrap's ``--seccomp FD``
and ``prctl(PR_SET_SECCOMP)`` take; it covers the machine's native ABI and its 32-bit one (x86_64 also
refuses the x32 ABI, whose calls would bypass it). On other machines there is no filter and runs
lack the ``no-keyring`` protection.
"""

from __future__ import annotations

import platform
import struct
from functools import lru_cache

_AUDIT_ARCH = {"x86_64": 0xC000003E, "i386": 0x40000003, "aarch64": 0xC00000B7, "arm": 0x40000028}
_KEYRING_CALLS = {"x86_64": (248, 249, 250), "i386": (286, 287, 288), "aarch64": (217, 218, 219),
                  "arm": (309, 310, 311)}
_ABIS = {"x86_64": ("x86_64", "i386"), "aarch64": ("aarch64", "arm")}
_X32_BIT = 0x40000000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW, _ERRNO, _ENOSYS = 0x7FFF0000, 0x00050000, 38

INSTALL_SOURCE = '''
def install_seccomp(program_hex):
    """Install the classic-BPF seccomp filter ``program_hex`` on this process (no_new_privs first)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    code = bytes.fromhex(program_hex)
    buffer = ctypes.create_string_buffer(code, len(code))
    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    program = Program(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(program), 0, 0) != 0:  # NO_NEW_PRIVS, SECCOMP
        raise OSError(ctypes.get_errno(), "installing the seccomp filter")
'''
"""Source of ``install_seccomp(program_hex)`` for the standalone helpers that run in front of a program
(``_unshare_root.py``, ``_reaper.py``); bubblewrap installs the same program itself."""


@lru_cache(maxsize=None)
def keyring_filter(machine: str | None = None) -> bytes | None:
    """The filter program for ``machine`` (default: this one's), or None where its syscall numbers are unknown."""
    abis = _ABIS.get(machine or platform.machine())
    if abis is None:
        return None
    code: list[tuple[int, object, object, int]] = [(_LD_W_ABS, 0, 0, 4)]  # seccomp_data.arch
    code += [(_JEQ_K, abi, 0, _AUDIT_ARCH[abi]) for abi in abis]
    code.append((_RET_K, 0, 0, _ALLOW))
    labels: dict[str, int] = {}
    for abi in abis:
        labels[abi] = len(code)
        code.append((_LD_W_ABS, 0, 0, 0))  # seccomp_data.nr
        if abi == "x86_64":
            code.append((_JGE_K, "deny", 0, _X32_BIT))
        code += [(_JEQ_K, "deny", 0, number) for number in _KEYRING_CALLS[abi]]
        code.append((_RET_K, 0, 0, _ALLOW))
    labels["deny"] = len(code)
    code.append((_RET_K, 0, 0, _ERRNO | _ENOSYS))
    out = b""
    for index, (op, true, false, k) in enumerate(code):
        jt = labels[true] - index - 1 if isinstance(true, str) else true
        jf = labels[false] - index - 1 if isinstance(false, str) else false
        out += struct.pack("=HBBI", op, jt, jf, k)
    return out
