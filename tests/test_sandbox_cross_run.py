"""Runs cannot reach each other: what one run leaves behind (daemons, files, links, keys, IPC, ...) never
reaches a later run or one beside it, on every layer (bwrap, warm forks, unshare, none, docker) and for
every caller: root, and a real unprivileged uid (this file's ``drive`` re-run through ``setpriv``,
skipped with the reason where that uid cannot run this checkout's Python).

Verdicts: the attacks of ``attacks.CROSS_RUN_ATTACKS`` leave processes that rewrite later runs'
``checker.py`` or steal their sealed token through ``/proc``; later wrong candidates must still be
judged wrong, and nothing of the attack may be alive once its run has ended. Bytes: ``PLANT_AND_LOOK``
plants its token in every way it can; a later run in the same slot must see none of it (``none`` shares
what it documents it lacks: the host's network and pid numbers, and as another user the host's files).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest

from monkeybarrel.kits.code_programs import assemble_program, checked_job, passed
from monkeybarrel.sandbox import attacks
from monkeybarrel.sandbox.base import Limits
from monkeybarrel.sandbox.docker_backend import docker_unavailable_reason

LIMITS = Limits(time_s=10, memory_mb=512, processes=64, output_bytes=1 << 16)
PRELUDE = 'def add(a, b):\n    """The sum."""\n'
TESTS = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-4, 4) == 0\n"
QUICK = ("a daemon rewrites later runs' checker.py", "kill the sandbox's keepers and wrappers, then a daemon")
NONE_SHARES = {"tcp-time-wait", "pid-counter"}
"""What ``none`` lacks and a plant can therefore carry: the host's network (TIME_WAIT entries) and pid counter."""


def _box(layer: str, work_root: str, workers: int):
    from monkeybarrel.sandbox.local import LocalSandbox

    if layer == "docker":
        from monkeybarrel.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(limits=LIMITS, max_workers=workers)
    return LocalSandbox(limits=LIMITS, max_workers=workers, work_root=work_root,
                        isolation=layer.replace("warm", "bwrap"), warm_python=layer == "warm",
                        allow_unisolated=layer == "none")


def _job(code: str):
    return checked_job(assemble_program(PRELUDE, code, "add"), PRELUDE, TESTS, "add", call_check=True, limits=LIMITS)


def _run(box, job):
    return box.run(job.files, job.command, limits=job.limits, sealed=job.sealed)


def drive(layer: str, names: tuple[str, ...], concurrent: bool, plants: bool, victims: int = 2) -> dict:
    """Attack then judge ``victims`` wrong candidates on ``layer`` as this process's uid; plant then look."""
    warnings.simplefilter("ignore", RuntimeWarning)
    work_root = tempfile.mkdtemp(prefix="mb-cross-run-test-", dir="/tmp")
    os.chmod(work_root, 0o711)
    report: dict = {"forged": {}, "alive": {}, "seen": {}}
    wrong = _job("def add(a, b):\n    return a - b\n")
    try:
        try:
            box = _box(layer, work_root, 2)
        except ValueError as exc:  # the layer does not work here (no bubblewrap, no user namespaces, ...)
            return {"skipped": str(exc)}
        try:
            report["protections"] = list(box.protections)
            report["line"] = box.layer().line()
            texts = attacks.cross_run_attacks("add", seconds=8.0, caller_mark="test_sandbox_cross_run")
            for name in names:
                _run(box, _job(texts[name]))
                time.sleep(0.3)
                report["forged"][name] = sum(passed(_run(box, wrong)) for _ in range(victims))
                report["alive"][name] = len(attacks.leftovers())
                attacks.kill_leftovers()
            if concurrent:
                attacker = threading.Thread(target=_run, args=(box, _job(attacks.concurrent_attack("add", 3.0))))
                attacker.start()
                time.sleep(0.6)
                report["forged"]["concurrent"] = sum(passed(_run(box, wrong)) for _ in range(victims))
                attacker.join()
                report["alive"]["concurrent"] = len(attacks.leftovers())
                attacks.kill_leftovers()
            report["control"] = passed(_run(box, _job("def add(a, b):\n    return a + b\n")))
        finally:
            box.close()
        if plants:
            box = _box(layer, work_root, 1)
            try:
                token = uuid.uuid4().hex[:12]
                limits = Limits(time_s=30, memory_mb=512, output_bytes=8 << 20)
                looks = []
                for mode in ("look", "plant", "look"):
                    looks.append(box.run({"main.py": attacks.PLANT_AND_LOOK}, ["python3", "main.py", token, mode],
                                         limits=limits).stdout)
                report["seen"] = attacks.planted_bytes_seen(json.loads(looks[0]), json.loads(looks[2]), token)
            finally:
                box.close()
                attacks.kill_leftovers()
    finally:
        attacks.kill_leftovers()
        shutil.rmtree(work_root, ignore_errors=True)
    return report


def _free_uid() -> int:
    """A uid with no passwd entry and no process (the breach sweep of ``none`` may kill that uid's processes)."""
    used = {int(line.split(":")[2]) for line in Path("/etc/passwd").read_text().splitlines() if line.count(":") >= 3}
    running = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                running.add(entry.stat().st_uid)
            except OSError:  # ended meanwhile
                continue
    return next(uid for uid in range(42420, 43420) if uid not in used | running)


def _drive_as_user(layer: str, names, concurrent: bool, plants: bool) -> dict:
    uid = _free_uid()
    how = attacks.unprivileged_python(uid)
    if isinstance(how, str):
        pytest.skip(how)
    prefix, env = how
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env["PYTHONPATH"]])
    code = (f"import json, test_sandbox_cross_run as t; "
            f"print(json.dumps(t.drive({layer!r}, {tuple(names)!r}, {concurrent!r}, {plants!r})))")
    done = subprocess.run([*prefix, "-c", code], env=env, cwd="/", capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout.decode().splitlines()[-1])


def _needs(layer: str) -> None:
    if layer == "docker":
        reason = docker_unavailable_reason()
        if reason:
            pytest.skip(reason)
    elif layer in ("bwrap", "warm") and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")


def _check(report: dict, layer: str, caller: str, plants: bool) -> None:
    if "skipped" in report:
        pytest.skip(report["skipped"])
    assert report["control"], "the right candidate must still be judged right"
    assert report["forged"] and set(report["forged"].values()) == {0}, report["forged"]
    assert set(report["alive"].values()) == {0}, f"processes of an attack outlived its run: {report['alive']}"
    if not plants:
        return
    if layer != "none":
        assert report["seen"] == {}, report["seen"]
    elif caller == "root":
        assert set(report["seen"]) <= NONE_SHARES, report["seen"]  # what the layer states it lacks
        assert "private-tmp" not in report["protections"] and "netns" not in report["protections"]


def _drive(layer: str, caller: str, names, concurrent: bool, plants: bool) -> dict:
    _needs(layer)
    if caller == "root":
        if os.geteuid() != 0:
            pytest.skip("the root caller needs root")
        return drive(layer, tuple(names), concurrent, plants)
    if layer == "docker":
        pytest.skip("another user reaches Docker only through its socket (the docker group: root's own power)")
    return _drive_as_user(layer, names, concurrent, plants)


def test_only_the_leftovers_of_this_process_are_counted_and_killed():
    """Another test or benchmark run beside this one (its attacking run still going) is not counted or killed
    here: counting every ``mb-left-*`` process of the host failed the cross-run tests when two runs overlapped."""
    named = ("import ctypes, sys, time\nctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)\n"
             "print(flush=True)\ntime.sleep(60)\n")
    other = "mb-left-" + ("0000000" if attacks.LEFTOVER_NAME != "mb-left-0000000" else "1111111")
    started = [subprocess.Popen([sys.executable, "-c", named, name], stdout=subprocess.PIPE)
               for name in (attacks.LEFTOVER_NAME, other)]
    try:
        for process in started:
            process.stdout.readline()  # named
        ours, theirs = (process.pid for process in started)
        assert ours in attacks.leftovers() and theirs not in attacks.leftovers()
        attacks.kill_leftovers()
        assert started[0].wait(timeout=10) == -9 and started[1].poll() is None
    finally:
        for process in started:
            process.kill()
            process.wait()


@pytest.mark.parametrize("layer", ["bwrap", "warm", "unshare", "none"])
def test_leftovers_of_a_run_cannot_forge_later_verdicts(layer):
    report = _drive(layer, "root", QUICK, concurrent=False, plants=layer in ("warm", "none"))
    _check(report, layer, "root", plants=layer in ("warm", "none"))


def test_none_as_another_user_keeps_runs_apart():
    """The case of issue #35: ``none`` as a non-root caller (no cgroup, no uid of its own): a daemon left by
    one candidate used to rewrite later runs' checker.py (4 of 4 forged)."""
    report = _drive("none", "user", QUICK, concurrent=True, plants=False)
    _check(report, "none", "user", plants=False)
    assert "YOUR uid" in report["line"] and "take turns" in report["line"]


@pytest.mark.slow
@pytest.mark.parametrize("caller", ["root", "user"])
@pytest.mark.parametrize("layer", ["bwrap", "warm", "unshare", "none", "docker"])
def test_every_cross_run_attack_on_every_layer_and_caller(layer, caller):
    plants = not (layer == "none" and caller == "user")  # that layer is the caller: its files are the caller's
    report = _drive(layer, caller, tuple(attacks.CROSS_RUN_ATTACKS), concurrent=True, plants=plants)
    _check(report, layer, caller, plants)


if __name__ == "__main__":  # pragma: no cover - for a quick look by hand
    print(json.dumps(drive(sys.argv[1], QUICK, True, True), indent=1))
