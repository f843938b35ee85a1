"""pytest plugin that reports each test's outcome with the run's sealed token (standard library and
pytest only; ``evaluate.test_execution`` puts ``take_sealed`` in front of this source and loads it
with ``-p`` before pytest imports anything of the repository).

At import it takes the token (``$MONKEYBARREL_SEALED``, a file it unlinks); it records each test's
outcome as pytest's ``-rA`` summary would name it (PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS); at
the end of the session it writes ``attest(token, JSON {node id: status})`` to the file descriptor
``$MONKEYBARREL_VERDICT_FD`` (the command's own output). Printed summary lines, an early
``sys.exit``/``os._exit``, an ``atexit`` hook or a killed pytest leave no verdict, so every test
counts as failed. The code under test shares this process: a patch written against this plugin
(reading its memory, rewriting pytest's internals) could still forge, as it could with any harness
that runs in the tests' process, the official one included.
"""

import json
import os

_TOKEN, _ = take_sealed()  # noqa: F821 - defined by the sealed reader in front of this source
_STATUSES = {}


def pytest_runtest_logreport(report):
    previous = _STATUSES.get(report.nodeid)
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            status = "XPASS" if report.passed else "XFAIL"
        else:
            status = {"passed": "PASSED", "failed": "FAILED", "skipped": "SKIPPED"}[report.outcome]
    elif report.failed:
        status = "ERROR"
    elif report.skipped and report.when == "setup":
        status = "XFAIL" if hasattr(report, "wasxfail") else "SKIPPED"
    else:
        return
    if previous != "ERROR":
        _STATUSES[report.nodeid] = status


def pytest_sessionfinish(session, exitstatus):
    line = attest(_TOKEN, json.dumps(_STATUSES, sort_keys=True)).encode()  # noqa: F821 - the sealed reader's
    fd = int(os.environ.get("MONKEYBARREL_VERDICT_FD", "1"))
    while line:
        line = line[os.write(fd, line):]
