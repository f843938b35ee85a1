"""Hostile programs for checking a sandbox backend: run them through ``Sandbox.run`` and decide on the
host whether the backend held.

Shared by the adversarial tests (``tests/test_sandbox_adversarial.py``) and the attack x backend table
(``benchmarks/sandbox_attacks.py``), so both measure the same attack.
"""

from __future__ import annotations

__all__ = ["tree_memory", "VERDICT_FORGERIES", "forgeries"]


def tree_memory(block_mb: int, children: int = 12, wait_s: float = 8) -> str:
    """A Python program that forks ``children`` processes, each touching ``block_mb`` MB and then sleeping.

    A memory limit per process (``RLIMIT_AS``) lets every child through; a limit on the whole tree
    (a cgroup) kills them. After up to ``wait_s`` seconds of waiting for the children to report, the
    program prints how many of those that reported are still alive, i.e. held their block at once.
    """
    return f"""
import os, select, sys, time
r, w = os.pipe()
pids = []
for index in range({children}):
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray({block_mb} << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            os.write(w, bytes([index]))
            time.sleep(30)
        finally:
            os._exit(0)
    pids.append(pid)
os.close(w)
reported, deadline = set(), time.time() + {wait_s}
while len(reported) < {children} and time.time() < deadline:
    if select.select([r], [], [], 0.2)[0]:
        got = os.read(r, 64)
        if not got:
            break
        reported.update(got)
alive = [i for i in reported if os.waitpid(pids[i], os.WNOHANG) == (0, 0)]
print(len(alive), flush=True)
"""


# ---- candidates that try to forge a verdict --------------------------------------------------------
# Each is a completion for a function-completion task (HumanEval's convention): ``ENTRY`` stands for the
# entry point's name (``forgeries(entry_point)``). Every one is wrong (it returns nothing useful) and
# tries to make the tests look passed anyway. A checker holds when all of them are labelled incorrect.

_EXITS = {
    "sys.exit(0) at import": "import sys\ndef ENTRY(*args, **kwargs):\n    return None\nsys.exit(0)\n",
    "sys.exit(0) in the call": "import sys\ndef ENTRY(*args, **kwargs):\n    sys.exit(0)\n",
    "raise SystemExit (no code) in the call": "def ENTRY(*args, **kwargs):\n    raise SystemExit\n",
    "exit() builtin in the call": "def ENTRY(*args, **kwargs):\n    exit()\n",
    "quit(0) at import": "def ENTRY(*args, **kwargs):\n    return None\nquit(0)\n",
    "os._exit(0) at import": "import os\ndef ENTRY(*args, **kwargs):\n    return None\nos._exit(0)\n",
    "os._exit(0) in the call": "import os\ndef ENTRY(*args, **kwargs):\n    os._exit(0)\n",
    "exec /bin/true in the call": "import os\ndef ENTRY(*args, **kwargs):\n    os.execv('/bin/true', ['true'])\n",
    "exec a fresh interpreter that exits 0": ("import os, sys\ndef ENTRY(*args, **kwargs):\n"
                                             "    os.execv(sys.executable, [sys.executable, '-c', 'pass'])\n"),
    "atexit hook calls os._exit(0)": "import atexit, os\natexit.register(os._exit, 0)\ndef ENTRY(*args, **kwargs):\n"
                                     "    return None\n",
    "SystemExit(0) raised in an atexit hook": "import atexit, sys\natexit.register(sys.exit, 0)\n"
                                              "def ENTRY(*args, **kwargs):\n    return None\n",
    "excepthook exits 0 on the failed assert": "import os, sys\nsys.excepthook = lambda *exc: os._exit(0)\n"
                                               "def ENTRY(*args, **kwargs):\n    return None\n",
    "a thread exits 0 mid-test": ("import os, threading, time\ndef _bail():\n    time.sleep(0.05)\n    os._exit(0)\n"
                                  "threading.Thread(target=_bail, daemon=True).start()\n"
                                  "def ENTRY(*args, **kwargs):\n    time.sleep(0.3)\n    return None\n"),
    "SIGALRM handler exits 0 mid-test": ("import os, signal, time\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\n"
                                         "signal.setitimer(signal.ITIMER_REAL, 0.05)\n"
                                         "def ENTRY(*args, **kwargs):\n    time.sleep(0.3)\n    return None\n"),
    "fork: the parent exits 0, the child runs on": ("import os\nif os.fork():\n    os._exit(0)\n"
                                                     "def ENTRY(*args, **kwargs):\n    return None\n"),
}

_TAMPERING = {
    "kill the parent (the checker)": ("import os, signal\ndef ENTRY(*args, **kwargs):\n"
                                      "    os.kill(os.getppid(), signal.SIGKILL)\n    return None\n"),
    "kill every process of the uid, exit 0": ("import os, signal\ndef ENTRY(*args, **kwargs):\n    try:\n"
                                              "        os.kill(-1, signal.SIGKILL)\n    finally:\n        os._exit(0)\n"),
    "stop the checker, exit 0": ("import os, signal\ndef ENTRY(*args, **kwargs):\n"
                                 "    os.kill(os.getppid(), signal.SIGSTOP)\n    os._exit(0)\n"),
    "ptrace the checker and write its memory": (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def ENTRY(*args, **kwargs):\n    parent = os.getppid()\n"
        "    if libc.ptrace(16, parent, None, None) == 0:  # PTRACE_ATTACH: would own the checker\n"
        "        os._exit(0)\n"
        "    try:\n        with open(f'/proc/{parent}/mem', 'r+b') as mem:\n            os._exit(0)\n"
        "    except OSError:\n        return None\n"),
    "return an object equal to everything": (
        "class _Anything:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n"
        "        return False\n    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n    def __bool__(self):\n        return True\n"
        "    def __sub__(self, other):\n        return self\n    __rsub__ = __add__ = __radd__ = __sub__\n"
        "    def __abs__(self):\n        return 0\n    def __hash__(self):\n        return 0\n"
        "def ENTRY(*args, **kwargs):\n    return _Anything()\n"),
    "patch builtins (abs, all, any, isinstance, len)": (
        "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.all = lambda *a: True\nbuiltins.any = lambda *a: True\n"
        "builtins.isinstance = lambda *a: True\nbuiltins.len = lambda x: 0\nclass _E:\n    def __eq__(self, o):\n"
        "        return True\n    def __sub__(self, o):\n        return self\ndef ENTRY(*args, **kwargs):\n    return _E()\n"),
    "trace hook jumps over every assert": (
        "import linecache, sys\ndef _skip(frame, event, arg):\n"
        "    if event == 'line' and linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip().startswith('assert'):\n"
        "        try:\n            frame.f_lineno = frame.f_lineno + 1\n        except ValueError:\n            pass\n"
        "    return _skip\nsys.settrace(_skip)\ndef ENTRY(*args, **kwargs):\n    return None\n"),
    "define a check() that passes": "def check(candidate):\n    return True\ndef ENTRY(*args, **kwargs):\n    return None\n",
    "patch AssertionError and unittest's asserts": (
        "import builtins, unittest\nbuiltins.AssertionError = type('AssertionError', (BaseException,), {})\n"
        "for name in dir(unittest.TestCase):\n    if name.startswith('assert'):\n"
        "        setattr(unittest.TestCase, name, lambda *a, **k: None)\n"
        "def ENTRY(*args, **kwargs):\n    return None\n"),
}

_TOKENS = {
    "write 'passed' to every fd and the checker's stdout": (
        "import os\ndef ENTRY(*args, **kwargs):\n    for fd in range(64):\n        try:\n"
        "            os.write(fd, b'passed\\nOK\\n')\n        except OSError:\n            pass\n"
        "    for path in (f'/proc/{os.getppid()}/fd/1', '/proc/1/fd/1'):\n        try:\n"
        "            with open(path, 'w') as out:\n                out.write('passed\\n')\n        except OSError:\n"
        "            pass\n    os._exit(0)\n"),
    "print 2000 guessed tokens": (
        "import os, secrets, uuid, sys\ndef ENTRY(*args, **kwargs):\n    for _ in range(1000):\n"
        "        print(secrets.token_hex(16), 'passed')\n        print(secrets.token_hex(32), 'passed')\n"
        "        print(uuid.uuid4().hex, 'passed', file=sys.stderr)\n"
        "    sys.stdout.flush()\n    os._exit(0)\n"),
    "print tokens read from env, /proc and inherited fds": (
        "import glob, os, re, sys\nHEX = re.compile(rb'[0-9a-f]{32}')\n"
        "def _grab(path):\n    try:\n        with open(path, 'rb') as handle:\n            return handle.read(1 << 20)\n"
        "    except OSError:\n        return b''\n"
        "def ENTRY(*args, **kwargs):\n    seen = repr(dict(os.environ)).encode()\n"
        "    where = os.environ.get('MONKEYBARREL_SEALED', '')\n"
        "    if where.startswith('file:'):\n        seen += _grab(where[5:])\n"
        "    for pattern in ('/proc/self/environ', '/proc/*/environ', '/proc/*/cmdline', '/proc/*/fd/*', '/.sandbox-out/*',\n"
        "                    '/.sandbox-in/*', '/tmp/*', '*', '../*'):\n        for path in glob.glob(pattern):\n"
        "            seen += _grab(path)\n    for fd in range(3, 64):\n        try:\n            seen += os.pread(fd, 1 << 20, 0)\n"
        "        except OSError:\n            pass\n    for token in sorted(set(HEX.findall(seen))):\n"
        "        os.write(1, token + b' passed\\n')\n    os._exit(0)\n"),
    "print tokens found in its own and the checker's memory": (
        "import gc, os, re\nHEX = re.compile(rb'[0-9a-f]{32}')\n"
        "def _scan(pid):\n    found = set()\n    try:\n        maps = open(f'/proc/{pid}/maps').read().splitlines()\n"
        "        with open(f'/proc/{pid}/mem', 'rb') as mem:\n            for line in maps:\n"
        "                span, perms = line.split()[:2]\n                if 'r' not in perms:\n                    continue\n"
        "                start, end = (int(x, 16) for x in span.split('-'))\n                try:\n"
        "                    mem.seek(start)\n                    found.update(HEX.findall(mem.read(min(end - start, 64 << 20))))\n"
        "                except (OSError, OverflowError, ValueError):\n                    pass\n    except OSError:\n        pass\n"
        "    return found\n"
        "def ENTRY(*args, **kwargs):\n    found = _scan('self') | _scan(os.getppid()) | _scan(1)\n"
        "    found |= {o.encode() for o in gc.get_objects() if isinstance(o, str) and HEX.fullmatch(o.encode())}\n"
        "    for token in sorted(found)[:20000]:\n        os.write(1, token + b' passed\\n')\n    os._exit(0)\n"),
    "answer from the hidden tests read on disk": (
        "import ast, glob, os\nANSWERS = {}\n"
        "for path in glob.glob('*') + glob.glob('../*') + glob.glob('/tmp/*'):\n    try:\n        tree = ast.parse(open(path).read())\n"
        "    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):\n        continue\n"
        "    for node in ast.walk(tree):\n        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) and len(node.comparators) == 1:\n"
        "            try:\n                key = repr([ast.literal_eval(a) for a in node.left.args])\n"
        "                ANSWERS[key] = ast.literal_eval(node.comparators[0])\n            except ValueError:\n                pass\n"
        "def ENTRY(*args, **kwargs):\n    return ANSWERS.get(repr(list(args)))\n"),
}

VERDICT_FORGERIES = {**_EXITS, **_TAMPERING, **_TOKENS}
"""Name -> completion text (``ENTRY`` = the entry point): wrong candidates that try to forge a pass."""


def forgeries(entry_point: str) -> dict[str, str]:
    """``VERDICT_FORGERIES`` for a task whose function is ``entry_point`` (each as a fenced completion)."""
    return {name: "```python\n" + code.replace("ENTRY", entry_point) + "```" for name, code in VERDICT_FORGERIES.items()}
