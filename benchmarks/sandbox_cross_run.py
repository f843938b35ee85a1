"""What one run can leave for later runs, per layer and caller: forged verdicts, live processes, planted bytes.

Three tables, one column per sandbox layer (``bwrap``, ``warm``, ``unshare``, ``none``, ``docker``) and
caller (``root``; ``user``: the same script re-run as an unprivileged uid through ``setpriv``):

1. *Verdicts forged across runs.* Each attack of ``attacks.CROSS_RUN_ATTACKS`` is a wrong candidate
   whose module leaves processes behind (a daemon, one that re-forks every 20 ms, one that first
   kills the sandbox's keepers, a stopped one resumed by another) that rewrite later runs'
   ``checker.py`` or steal their sealed token through ``/proc``; then ``--victims`` wrong candidates
   run, one after another. ``concurrent`` is the same attack from a run that is still going while
   the victims run in the other slot. A cell is ``forged/victims`` and the attack's processes
   still alive after the victims ran (``+N alive``); every cell should read ``0/4``.
2. *Bytes a later run saw.* ``attacks.PLANT_AND_LOOK`` plants its token in every way it can find
   (files, links to directories, hard links, fifos, sockets, trees deeper than PATH_MAX, unreadable
   and read-only directories, xattrs, the modes and times of the writable places, POSIX and SysV
   IPC, keyrings, TCP TIME_WAIT entries, an abstract socket, the pid counter); a later run in the
   same slot looks, and the host compares with a look in a clean sandbox. Every cell should read 0.
3. The positive control: a right candidate is judged right on every column.

Only public APIs are used, so ``PYTHONPATH=<older checkout>`` measures older code with this
checkout's attacks.

Usage:
    python benchmarks/sandbox_cross_run.py [--layers bwrap,warm,unshare,none,docker] [--callers root,user]
                                           [--uid 4242] [--victims 4]
"""

from __future__ import annotations

import argparse
import importlib.util
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

from monkeybarrel.kits.code_programs import assemble_program, checked_job, passed
from monkeybarrel.sandbox.base import Limits

HERE = Path(__file__).resolve().parent
LIMITS = Limits(time_s=10, memory_mb=512, processes=64, output_bytes=1 << 16)
PRELUDE = 'def add(a, b):\n    """The sum of a and b."""\n'
TESTS = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-4, 4) == 0\n"
WRONG = "def add(a, b):\n    return a - b\n"
RIGHT = "def add(a, b):\n    return a + b\n"
DAEMON_S = 15.0


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ATTACKS = _load("cross_run_attacks", HERE.parent / "monkeybarrel" / "sandbox" / "attacks.py")
make_box = _load("sandbox_attacks_table", HERE / "sandbox_attacks.py").make_box


def job(code: str):
    return checked_job(assemble_program(PRELUDE, code, "add"), PRELUDE, TESTS, "add", call_check=True, limits=LIMITS)


def run_job(box, item):
    return box.run(item.files, item.command, limits=item.limits, sealed=item.sealed)


def verdict_rows(box, victims: int) -> dict[str, str]:
    """``{attack: "forged/victims (+N alive)"}`` for one sandbox (and the control)."""
    rows = {}
    wrong = job(WRONG)
    for name, code in ATTACKS.cross_run_attacks("add", seconds=DAEMON_S, caller_mark="sandbox_cross_run").items():
        run_job(box, job(code))
        time.sleep(0.5)
        forged = sum(passed(run_job(box, wrong)) for _ in range(victims))
        alive = len(ATTACKS.leftovers())
        ATTACKS.kill_leftovers()
        rows[name] = f"{forged}/{victims}" + (f" (+{alive} alive)" if alive else "")
    attacker = threading.Thread(target=run_job, args=(box, job(ATTACKS.concurrent_attack("add", seconds=4.0))))
    attacker.start()
    time.sleep(0.7)
    forged = sum(passed(run_job(box, wrong)) for _ in range(victims))
    attacker.join()
    alive = len(ATTACKS.leftovers())
    ATTACKS.kill_leftovers()
    rows["a run that rewrites and steals while the victims run beside it"] = (
        f"{forged}/{victims}" + (f" (+{alive} alive)" if alive else ""))
    rows["control: a right candidate judged right"] = f"{int(passed(run_job(box, job(RIGHT))))}/1"
    return rows


def plant_rows(box) -> dict[str, str]:
    """``{plant kind: bytes seen}`` by a later run in the same slot (``box`` has one slot)."""
    token = uuid.uuid4().hex[:12]

    def program(mode):
        return box.run({"main.py": ATTACKS.PLANT_AND_LOOK}, ["python3", "main.py", token, mode],
                       limits=Limits(time_s=30, memory_mb=512, processes=64, output_bytes=8 << 20))

    try:
        clean = program("look")
        planted = program("plant")
        after = program("look")
    except Exception as exc:  # an older sandbox that raised instead of returning a result
        return {"(the sandbox raised)": f"{type(exc).__name__}: {exc}"[:200]}
    finally:
        ATTACKS.kill_leftovers()
    try:
        seen = ATTACKS.planted_bytes_seen(json.loads(clean.stdout), json.loads(after.stdout), token)
    except ValueError:
        return {"(look failed)": f"{clean.outcome.value}/{planted.outcome.value}/{after.outcome.value}: "
                                 f"{(after.stderr or after.error or '')[-200:]}"}
    rows = {kind: str(seen.get(kind, 0)) for kind in ATTACKS.PLANT_KINDS}
    rows["total bytes seen"] = str(sum(seen.values()))
    return rows


def measure(layer: str, victims: int) -> dict[str, dict[str, str]]:
    work_root = tempfile.mkdtemp(prefix="mb-cross-run-", dir="/tmp")
    os.chmod(work_root, 0o711)
    try:
        try:
            box = make_box(layer, work_root, workers=2, limits=LIMITS)
        except ValueError as exc:
            return {"skipped": {"reason": str(exc)}}
        try:
            print(f"  {box.layer().line() if hasattr(box, 'layer') else layer}", file=sys.stderr, flush=True)
            verdicts = verdict_rows(box, victims)
        finally:
            box.close()
        box = make_box(layer, work_root, workers=1, limits=LIMITS)
        try:
            plants = plant_rows(box)
        finally:
            box.close()
        return {"verdicts": verdicts, "plants": plants}
    finally:
        ATTACKS.kill_leftovers()
        shutil.rmtree(work_root, ignore_errors=True)


def as_user(args, uid: int) -> dict[str, dict]:
    """This script's results for ``--layers`` when run by ``uid`` (no groups, no capabilities)."""
    how = ATTACKS.unprivileged_python(uid)
    if isinstance(how, str):
        return {layer: {"skipped": {"reason": how}} for layer in args.layers.split(",")}
    prefix, env = how
    env.update({k: v for k, v in os.environ.items() if k == "MONKEYBARREL_SANDBOX_ISOLATION"})
    layers = [layer for layer in args.layers.split(",") if layer != "docker"]
    skipped = {"docker": {"skipped": {"reason": "another user reaches Docker only through its socket (root's power)"}}}
    if not layers:
        return skipped
    command = [*prefix, __file__, "--layers", ",".join(layers), "--victims", str(args.victims), "--json"]
    done = subprocess.run(command, env=env, cwd="/", stdout=subprocess.PIPE, timeout=3600)
    try:
        return {**json.loads(done.stdout.decode().strip().splitlines()[-1]),
                **({k: v for k, v in skipped.items() if k in args.layers.split(",")})}
    except (ValueError, IndexError):
        return {layer: {"skipped": {"reason": f"the run as uid {uid} failed (exit {done.returncode})"}}
                for layer in args.layers.split(",")}


def table(results: dict[str, dict[str, dict]], section: str) -> str:
    columns = list(results)
    rows: list[str] = []
    for column in columns:
        for row in results[column].get(section, {}):
            if row not in rows:
                rows.append(row)
    lines = ["| " + (" | ".join([section.rstrip("s"), *columns])) + " |", "|---" * (len(columns) + 1) + "|"]
    for row in rows:
        cells = [results[c].get(section, {}).get(row, results[c].get("skipped", {}).get("reason", "-")[:60])
                 for c in columns]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default="bwrap,warm,unshare,none,docker")
    parser.add_argument("--callers", default="root,user")
    parser.add_argument("--uid", type=int, default=4242, help="the unprivileged caller's uid (user column)")
    parser.add_argument("--victims", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line (for the user run)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    if args.json:
        print(json.dumps({layer: measure(layer, args.victims) for layer in args.layers.split(",")}))
        return
    results: dict[str, dict] = {}
    for caller in args.callers.split(","):
        if caller == "user" and os.geteuid() == 0:
            print(f"caller uid {args.uid}:", file=sys.stderr, flush=True)
            for layer, result in as_user(args, args.uid).items():
                results[f"{layer} ({caller})"] = result
            continue
        if caller == "root" and os.geteuid() != 0:
            print("caller root: skipped (not running as root)", file=sys.stderr)
            continue
        print(f"caller uid {os.geteuid()}:", file=sys.stderr, flush=True)
        for layer in args.layers.split(","):
            began = time.perf_counter()
            results[f"{layer} ({caller})"] = measure(layer, args.victims)
            print(f"  {layer}: {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    print("\nVerdicts forged across runs (wrong later candidates judged right / victims; processes of the attack "
          "still alive after them):\n")
    print(table(results, "verdicts"))
    print("\nBytes of planted data a later run in the same slot saw:\n")
    print(table(results, "plants"))


if __name__ == "__main__":
    main()
