"""The checker of one code candidate, run inside the sandbox (standard library only; ``code_programs``
puts ``take_sealed`` in front of this source and runs the result as ``python3 -I checker.py``).

Two processes, so the candidate's code never shares one with the tests:

* the *checker* (this process; not dumpable, so nothing of the run can ptrace it or read its memory)
  first forks the *candidate* process, then takes the sealed input (the run's token and, as JSON, the
  visible code prompt, the hidden tests, the entry point), starts the candidate, runs the prompt and
  the tests in a namespace of its own with the entry point bound to a proxy, and - only when every
  assertion passed - writes ``attest(token, "passed")`` to its stdout;
* the *candidate* process closes every way back into the checker (the sealed channel, the checker's
  pipe ends, stdout: its prints go to stderr), waits for the start signal, loads ``candidate.py`` as
  a module and answers calls: arguments in, return value (or exception name and message) out.

Values cross as tagged JSON and the checker rebuilds plain builtins from them, so an object that
claims to equal everything, a patched ``builtins`` or a trace hook stays in the candidate's process.
A value crosses as the task means it (``encode``): any number by its value across the numeric tower
(``numbers.Integral`` -> int, a ``Fraction`` or a finite ``Decimal`` -> its exact rational, an int
when whole, other reals -> float), any mapping by its items (dict), any sequence by its items
(``UserList``, ``deque``, ``range``, arrays -> list), any set by its items, numpy values through
``tolist()``. The checker rebuilds exact built-ins (types included; a non-whole rational as a
``Fraction``), and every single ``==`` and ``!=`` of the tests is compared by ``same`` (the tests'
syntax tree is rewritten, ``EqualityBySame``): sequences (lists and tuples) by their items in order,
mappings by their items, anything else by Python's own ``==`` between the checker's trusted values
(``Fraction(1, 2) == 0.5``), so a tuple returned where the tests expect a list, or the reverse, is
the same answer, while ``type(x) is tuple`` still sees what the candidate returned.
The hidden tests are never on the run's disk and never in the candidate process's memory (it was
forked before the checker read them). A candidate that exits (``sys.exit``, ``os._exit``, ``exec``),
kills or stops the checker, or prints anything only makes the run fail: the token is in no file, no
environment variable and no memory the candidate can read.
"""

import ast
import builtins
import collections
import collections.abc
import ctypes
import decimal
import fractions
import json
import numbers
import os
import signal
import sys
import types

CANDIDATE_FILE = "candidate.py"
_SAFE_EXCEPTIONS = {name for name in dir(builtins) if isinstance(getattr(builtins, name), type)
                    and issubclass(getattr(builtins, name), Exception)}


class CandidateError(Exception):
    """The candidate process failed to answer a call (it ended, broke the protocol, or raised something
    that is not a plain built-in exception)."""


def same(a, b, depth=0):
    """Equality as the task means it: lists and tuples by their items in order, dicts by their items (values
    compared the same way), everything else by ``==``; the tests' ``==`` and ``!=`` go through it."""
    if a is b:
        return True
    if type(a) is type(b) and type(a) in (list, tuple, dict) and a == b:  # Python's own (C) equality holds
        return True
    if depth < 100 and isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y, depth + 1) for x, y in zip(a, b))
    if depth < 100 and isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key], depth + 1) for key in a)
    return a == b


class EqualityBySame(ast.NodeTransformer):
    """Rewrites ``x == y`` into ``__same__(x, y)`` and ``x != y`` into ``not __same__(x, y)`` (single comparisons;
    chains such as ``a == b == c`` keep Python's meaning)."""

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            return node
        call = ast.Call(func=ast.Name("__same__", ast.Load()), args=[node.left, node.comparators[0]], keywords=[])
        replaced = call if isinstance(node.ops[0], ast.Eq) else ast.UnaryOp(ast.Not(), call)
        return ast.copy_location(replaced, node)


def compile_tests(source):
    """The tests' code object, with every single ``==``/``!=`` comparing by ``same``."""
    tree = EqualityBySame().visit(ast.parse(source, "tests.py"))
    return compile(ast.fix_missing_locations(tree), "tests.py", "exec")


def rational(numerator, denominator):
    """The JSON form of an exact rational: an int when whole, else tagged ``q``."""
    return numerator if denominator == 1 else {"q": [numerator, denominator]}


def by_meaning(value, depth):
    """A value of another type, as the task means it (numbers by value, collections by items), or TypeError."""
    if isinstance(value, numbers.Rational) and hasattr(value, "denominator"):  # exact, whatever it claims to be
        return rational(int(value.numerator), int(value.denominator))
    if isinstance(value, numbers.Integral):  # registered without the ABC's numerator/denominator
        return int(value)
    if isinstance(value, decimal.Decimal):
        return rational(*value.as_integer_ratio()) if value.is_finite() else float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, numbers.Complex):
        return encode(complex(value), depth)
    if isinstance(value, collections.UserString):
        return str(value.data)
    if isinstance(value, collections.abc.Mapping):
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, collections.abc.Set):
        return {"s": [encode(item, depth + 1) for item in value]}
    if isinstance(value, collections.abc.Sequence):
        return [encode(item, depth + 1) for item in value]
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # numpy scalars and arrays
        return encode(value.tolist(), depth + 1)
    raise TypeError(f"a {type(value).__name__} cannot cross between the checker and the candidate")


def encode(value, depth=0):
    """A JSON-ready form of a value (tuples, sets, dicts with any keys, bytes, complex and non-whole
    rationals tagged; other types by ``by_meaning``)."""
    if depth > 100:
        raise ValueError("value nested more than 100 levels deep")
    if value is None or isinstance(value, (bool, str)):
        return value if not isinstance(value, str) else str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if isinstance(value, (bytes, bytearray)):
        return {"b" if isinstance(value, bytes) else "ba": bytes(value).hex()}
    if isinstance(value, list):
        return [encode(item, depth + 1) for item in value]
    if isinstance(value, tuple):
        return {"t": [encode(item, depth + 1) for item in value]}
    if isinstance(value, (set, frozenset)):
        return {"fs" if isinstance(value, frozenset) else "s": [encode(item, depth + 1) for item in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    return by_meaning(value, depth)


def decode(node, depth=0):
    """The value ``encode`` described, built from JSON only into trusted types (built-ins, ``Fraction``);
    anything else is a CandidateError."""
    if depth > 100:
        raise CandidateError("value nested more than 100 levels deep")
    if node is None or type(node) in (bool, int, float, str):
        return node
    if type(node) is list:
        return [decode(item, depth + 1) for item in node]
    if type(node) is dict and len(node) == 1:
        (tag, body), = node.items()
        if tag in ("t", "s", "fs") and type(body) is list:
            items = [decode(item, depth + 1) for item in body]
            return tuple(items) if tag == "t" else set(items) if tag == "s" else frozenset(items)
        if tag == "q" and type(body) is list and len(body) == 2 and all(type(x) is int for x in body) and body[1] > 0:
            return fractions.Fraction(*body)
        if tag == "d" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
        if tag in ("b", "ba") and type(body) is str:
            try:
                data = bytes.fromhex(body)
            except ValueError:
                raise CandidateError("the candidate process sent malformed bytes") from None
            return data if tag == "b" else bytearray(data)
        if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
            return complex(*body)
    raise CandidateError("the candidate process sent a malformed value")


def print_exception():
    """The current exception's traceback on stderr (``traceback`` is imported only when a test fails)."""
    import traceback

    traceback.print_exc()
    sys.stderr.flush()


def send(fd, message):
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


class Lines:
    """Reads newline-terminated messages from a pipe."""

    def __init__(self, fd):
        self.fd, self.pending = fd, b""

    def next(self):
        while b"\n" not in self.pending:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line


def candidate_process(entry_point, calls_fd, answers_fd, go_fd):
    """The candidate's side: load ``candidate.py`` after the start signal and answer calls until the pipe closes."""
    where = os.environ.pop("MONKEYBARREL_SEALED", "")
    if where.startswith("fd:"):
        try:
            os.close(int(where[3:]))
        except OSError:
            pass
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if os.read(go_fd, 1) != b"g":
        os._exit(0)
    os.close(go_fd)
    module = types.ModuleType("candidate")
    module.__file__ = CANDIDATE_FILE
    sys.modules["candidate"] = module
    try:
        with open(CANDIDATE_FILE) as handle:
            source = handle.read()
        exec(compile(source, CANDIDATE_FILE, "exec"), module.__dict__)
    except BaseException as exc:  # a module that does not load: every call reports it
        load_error = f"{type(exc).__name__}: {exc}"[:2000]
        print_exception()
    else:
        load_error = None
    calls = Lines(calls_fd)
    while True:
        line = calls.next()
        if line is None:
            os._exit(0)
        if load_error is not None:
            send(answers_fd, {"load_error": load_error})
            continue
        try:
            args, kwargs = decode(json.loads(line))
            send(answers_fd, {"ok": encode(module.__dict__[entry_point](*args, **kwargs))})
        except BaseException as exc:  # the candidate's own failure, reported to the checker
            send(answers_fd, {"raise": [type(exc).__name__, str(exc)[:2000]]})


class Candidate:
    """The checker's proxy for the candidate's entry point: each call is a round trip to its process."""

    def __init__(self, pid, calls_fd, answers_fd, name):
        self.pid, self.calls_fd, self.answers = pid, calls_fd, Lines(answers_fd)
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        send(self.calls_fd, encode([list(args), kwargs]))
        line = self.answers.next()
        if line is None:
            raise CandidateError(f"the candidate process ended ({self.ending()})")
        try:
            answer = json.loads(line)
        except ValueError:
            raise CandidateError("the candidate process broke the protocol") from None
        if type(answer) is not dict or len(answer) != 1:
            raise CandidateError("the candidate process broke the protocol")
        (kind, body), = answer.items()
        if kind == "ok":
            return decode(body)
        if kind == "raise" and type(body) is list and len(body) == 2 and all(type(x) is str for x in body):
            name, message = body
            if name in _SAFE_EXCEPTIONS:
                raise getattr(builtins, name)(message)
            raise CandidateError(f"{name}: {message}")
        if kind == "load_error" and type(body) is str:
            raise CandidateError(f"the candidate's module did not load: {body}")
        raise CandidateError("the candidate process broke the protocol")

    def ending(self):
        try:
            for _ in range(100):
                done, status = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    return f"exit status {os.waitstatus_to_exitcode(status)}"
                os.sched_yield()
        except ChildProcessError:
            pass
        return "it closed its answers"


def main():
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0: no ptrace, no /proc/<pid>/mem, fd or environ
    calls_r, calls_w = os.pipe()
    answers_r, answers_w = os.pipe()
    go_r, go_w = os.pipe()
    entry_point = sys.argv[1]
    pid = os.fork()
    if pid == 0:
        try:
            for fd in (calls_w, answers_r, go_w):
                os.close(fd)
            candidate_process(entry_point, calls_r, answers_w, go_r)
        finally:
            os._exit(1)
    for fd in (calls_r, answers_w, go_r):
        os.close(fd)
    token, payload = take_sealed()  # noqa: F821 - defined by the sealed reader in front of this source
    spec = json.loads(payload)
    os.write(go_w, b"g")
    os.close(go_w)
    sys.stdout = sys.stderr  # the tests' prints; the token goes to fd 1 directly
    candidate = Candidate(pid, calls_w, answers_r, entry_point)
    namespace = {"__name__": "__checker__", "__builtins__": builtins, "__same__": same}
    try:
        exec(compile(spec["prelude"], "prompt.py", "exec"), namespace)
        namespace[entry_point] = candidate
        exec(compile_tests(spec["tests"]), namespace)
        if spec["call_check"]:
            namespace["check"](candidate)
    except BaseException:
        print_exception()
        os.kill(pid, signal.SIGKILL)
        os._exit(1)
    os.kill(pid, signal.SIGKILL)
    os.write(1, attest(token, "passed").encode())  # noqa: F821 - defined by the sealed reader
    os._exit(0)


if __name__ == "__main__":
    main()
