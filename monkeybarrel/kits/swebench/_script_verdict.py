"""Runs a generated reproduction test and attests its own exit code (standard library only;
``voting.script_execution`` puts ``take_sealed`` in front of this source; run as
``python <this> <script>`` from the repository root).

It takes the run's token first, then executes the script as ``__main__``. The contract's code is the
script's own: 0 when it finishes, N when ``SystemExit(N)`` is raised *by the script's own code* (the
innermost frame runs a code object compiled from the script), 1 for anything else - an exception, or
a ``SystemExit`` raised inside the code under test (a patch that exits 0 on import votes for
nothing). It writes ``attest(token, code)`` and ends with ``os._exit`` (no ``atexit`` hook runs after it);
``os._exit`` inside the test leaves no verdict at all (an error). Code under test shares this process:
a patch written against this runner could still forge, as with any in-process harness.
"""

import builtins
import os
import sys
import traceback


def _code_objects(code):
    found = [code]
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            found.extend(_code_objects(const))
    return found


def main():
    token, _ = take_sealed()  # noqa: F821 - defined by the sealed reader in front of this source
    path = sys.argv[1]
    with open(path, encoding="utf-8") as handle:
        code = compile(handle.read(), path, "exec")
    own = _code_objects(code)
    sys.argv = sys.argv[1:]
    namespace = {"__name__": "__main__", "__file__": path, "__builtins__": builtins}
    try:
        exec(code, namespace)
        status = 0
    except SystemExit as exc:
        frame = exc.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        ours = frame is not None and any(frame.tb_frame.f_code is c for c in own)
        value = exc.code
        status = (0 if value is None else value if isinstance(value, int) else 1) if ours else 1
        if not ours:
            print("SystemExit raised outside the test script (by the code under test): an error", file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os.write(1, attest(token, str(status & 0xFF)).encode())  # noqa: F821 - the sealed reader's
    os._exit(status & 0xFF)


if __name__ == "__main__":
    main()
