"""Random byte damage and lost files in an experiment store: found, repaired, redone?

A real store (candidates written through the store, then a real run: two verifiers, answers,
labels, report) is built twice: as written (several chunks per table) and compacted (one file per
table). Each trial copies one of them, changes one byte at a random offset of a random file among
the candidate chunks, score chunks, ``answers.parquet`` and ``labels.parquet``, and then:

1. ``monkeybarrel store check`` must exit 1 naming exactly that file;
2. ``monkeybarrel store repair`` must leave a store that ``store check`` finds clean (exit 0);
3. a re-run of the same config (the embedded model samples what repair set aside) must complete:
   every (problem, sample) stored once, scored by every verifier, answered and labelled.

Prints how many trials passed each step, how the damage showed (data that fails to read, or bytes
that differ from ``written.jsonl`` although the file still parses), rows kept by salvage, and the
median seconds of each step (wall times on a shared machine). The commands run in-process through
the CLI's ``main``, as a user runs them, so an older checkout can be measured the same way:

    python benchmarks/store_faults.py --trials 100
    PYTHONPATH=/path/to/older/checkout python benchmarks/store_faults.py --trials 100

Lost files (``--faults gone``): every kind of loss (deleted; unreadable by ``chmod 000``; its folder
unreadable; a directory or a symlink loop in its place) of every kind of file (a candidates chunk, a
scores chunk, ``problems``/``answers``/``labels``/``selections.parquet``, ``config.yaml``,
``manifest.json``, ``metrics.json``, ``report.md``, ``written.jsonl``) in both base stores. Each trial
asks whether ``store check`` names the file, ``report`` refuses the store (exit 2, one line naming
the file; or, for a file it derives from the others, writes it again), ``store repair`` finishes (exit 0), ``store check`` is clean after it, and ``monkeybarrel
run`` (the CLI, as a user re-runs) completes the store. Run as root, the script re-executes itself
under ``setpriv`` without the capabilities that read any file, so ``chmod 000`` means unreadable.
``--before DIR`` runs the same trials on an older checkout (``PYTHONPATH=DIR``, in a process of its
own) and prints both, before -> after:

    python benchmarks/store_faults.py --faults gone --before /path/to/older/checkout
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.core.records import CANDIDATE_KEY, CANDIDATE_SCHEMA
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore
from monkeybarrel.orchestrator.cli.main import main as monkeybarrel_main
from monkeybarrel.samplers.engine_pool import shared_engines


def experiment_config(problems: int, samples: int) -> ExperimentConfig:
    """An arithmetic experiment on the embedded model with two verifiers; scores land in several chunks."""
    return ExperimentConfig.from_dict({
        "name": "faults", "seed": 0,
        "task": {"name": "arithmetic", "num_problems": problems, "options": {"difficulty": 1}},
        "generators": [{"id": "smol", "num_samples": samples, "max_tokens": 8, "temperature": 0.8,
                        "options": {"num_threads": 1}}],
        "verifiers": [{"name": "has", "type": "has_answer"}, {"name": "freq", "type": "answer_frequency"}],
        "store": {"chunk_rows": max(2 * samples, 1)},
    })


def build_store(directory: Path, config: ExperimentConfig) -> None:
    """Candidates (one chunk per problem, written through the store) and a real run over them."""
    from monkeybarrel.orchestrator.stages.preflight import build_task

    store = ExperimentStore(directory)
    spec = config.generators[0]
    for problem in build_task(config).load():
        store.append_chunk("candidates", pa.Table.from_pylist([
            {"problem_id": problem.problem_id, "generator_id": spec.id, "sample_index": i,
             "text": f"The answer is {i % 3}.", "prompt_tokens": 3, "completion_tokens": 5, "finish_reason": "stop",
             "wall_time_s": 0.1, "seed": 0, "error": None} for i in range(spec.num_samples)], schema=CANDIDATE_SCHEMA))
    run_experiment(config, directory, show_progress=False)


KINDS = {"candidates": "candidates/part-*.parquet", "scores": "scores/*/part-*.parquet",
         "answers": "answers.parquet", "labels": "labels.parquet"}


def pick_files(directory: Path, rng: random.Random, count: int) -> list[str]:
    """``count`` distinct files to damage: a random kind (candidates, scores, answers, labels), then a random
    file of it (relative paths)."""
    files = {kind: _relative(directory, pattern) for kind, pattern in KINDS.items()}
    picked: list[str] = []
    while len(picked) < count:
        choice = rng.choice(files[rng.choice(sorted(k for k in files if set(files[k]) - set(picked)))])
        if choice not in picked:
            picked.append(choice)
    return picked


def damage(path: Path, rng: random.Random) -> int:
    """Change the byte at a random offset of ``path`` (XOR with a random non-zero byte); returns the offset."""
    data = bytearray(path.read_bytes())
    offset = rng.randrange(len(data))
    data[offset] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))
    return offset


@dataclass
class Trial:
    """One trial's outcome."""

    damaged: list[str]
    found: list[str]
    how: list[str]
    clean_after_repair: bool
    complete_after_rerun: bool
    rows_kept: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def named_exactly(self) -> bool:
        return sorted(self.found) == sorted(self.damaged)

    @property
    def passed(self) -> bool:
        return self.named_exactly and self.clean_after_repair and self.complete_after_rerun


def cli(*args: str) -> tuple[int, list[str]]:
    """``monkeybarrel ARGS`` in this process: ``(exit status, output lines)``; an exception escaping it is status -1."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = monkeybarrel_main(list(args))
        except Exception as exc:  # a traceback instead of an exit status: what the command must never do
            return -1, [f"{type(exc).__name__}: {exc}"]
    return status, out.getvalue().splitlines()


def run_trial(base: Path, work: Path, config: ExperimentConfig, rng: random.Random, files: int = 1) -> Trial:
    """Copy ``base`` to ``work``, damage ``files`` random files at a random offset each, then ``store check``,
    ``store repair``, ``store check`` and a re-run, as a user would (the commands' exit statuses and lines)."""
    shutil.copytree(base, work)
    targets = pick_files(work, rng, files)
    for rel in targets:
        damage(work / rel, rng)
    files_now = [rel for pattern in KINDS.values() for rel in _relative(work, pattern)]
    seconds = {}
    began = time.perf_counter()
    status, lines = cli("store", "check", str(work))
    seconds["check"] = time.perf_counter() - began
    found = sorted(rel for rel in files_now if status == 1 and any(rel in line for line in lines))
    how = ["bytes differ, still parses" if any(line.startswith(f"{rel}: bytes differ") for line in lines)
           else "fails to read" for rel in targets]
    began = time.perf_counter()
    _, actions = cli("store", "repair", str(work))
    seconds["repair"] = time.perf_counter() - began
    clean = cli("store", "check", str(work))[0] == 0
    began = time.perf_counter()
    try:
        run_experiment(config, work, show_progress=False)
    except Exception:  # counted as incomplete below
        pass
    seconds["re-run"] = time.perf_counter() - began
    kept = sum(int(m.group(1)) for line in actions if (m := re.search(r"(\d+) row\(s\) that still read kept", line)))
    return Trial(targets, found, how, clean, complete(work, config), kept, seconds)


def _relative(root: Path, pattern: str) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in Path(root).glob(pattern))


def complete(directory: Path, config: ExperimentConfig) -> bool:
    """Is every (problem, sample) stored once, scored by every verifier, answered and labelled, and the store clean?"""
    store = ExperimentStore(directory)
    try:
        candidates = store.candidates()  # raises on duplicate keys
        tables = [candidates, *(store.scores(v.name) for v in config.verifiers), store.read_table("answers"),
                  store.read_table("labels")]
        problems = store.read_table("problems").column("problem_id").to_pylist()
    except Exception:
        return False
    if any(table is None for table in tables):  # (a table that is not there)
        return False
    expected = {(p, g.id, i) for g in config.generators for p in problems for i in range(g.num_samples)}
    keyed = [set(zip(*(t.column(k).to_pylist() for k in CANDIDATE_KEY))) for t in tables]
    return (candidates.num_rows == len(expected) and all(k == expected for k in keyed)
            and all(t.num_rows == len(expected) for t in tables) and cli("store", "check", str(directory))[0] == 0)


def bases(root: Path, config: ExperimentConfig) -> dict[str, Path]:
    """The two base stores: ``chunked`` (as a run writes it) and ``compacted``."""
    chunked, compacted = root / "chunked", root / "compacted"
    build_store(chunked, config)
    shutil.copytree(chunked, compacted)
    cli("store", "compact", str(compacted))
    return {"chunked": chunked, "compacted": compacted}


# ---- lost files ------------------------------------------------------------------------------------
LOSSES = ("deleted", "unreadable (chmod 000)", "folder unreadable (chmod 000)", "a directory in its place",
          "a symlink loop")
UNREADABLE = ("unreadable (chmod 000)", "folder unreadable (chmod 000)")
OUTPUTS = ("selections.parquet", "metrics.json", "report.md")
"""Files ``report`` writes from the others: rebuilding one is as good as refusing the store."""
LOST_FILES = {"candidates chunk": "candidates/part-*.parquet", "scores chunk": "scores/*/part-*.parquet",
              **{name: name for name in ("problems.parquet", "answers.parquet", "labels.parquet", "selections.parquet",
                                         "config.yaml", "manifest.json", "metrics.json", "report.md", "written.jsonl")}}


def lose(path: Path, loss: str) -> None:
    """Make the store file ``path`` lost in the way ``loss`` names."""
    if loss == "deleted":
        path.unlink()
    elif loss == "unreadable (chmod 000)":
        path.chmod(0)
    elif loss == "folder unreadable (chmod 000)":
        path.parent.chmod(0)
    elif loss == "a directory in its place":
        path.unlink()
        path.mkdir()
    elif loss == "a symlink loop":
        path.unlink()
        path.symlink_to(path.name)


@dataclass
class LossTrial:
    """One lost file and what each command made of it."""

    loss: str
    kind: str
    variant: str
    file: str
    named: bool = False
    report_refused: bool = False
    repair_finished: bool = False
    clean_after_repair: bool = False
    complete_after_rerun: bool = False


def run_loss_trial(trial: LossTrial, base: Path, work: Path, config: ExperimentConfig, config_file: Path) -> LossTrial:
    """Copy ``base`` to ``work``, lose one file, then check, report, repair, check and ``run`` as a user would."""
    shutil.copytree(base, work, symlinks=True)
    path = work / trial.file
    lose(path, trial.loss)
    status, lines = cli("store", "check", str(work))
    trial.named = status == 1 and any(line.startswith(f"{trial.file}: ") for line in lines)
    status, lines = cli("report", str(work))
    errors = [line for line in lines if line.startswith("error: ")]
    named = str(path.parent) if trial.loss.startswith("folder") else str(path)   # (any file of the folder)
    rebuilt = status == 0 and trial.file in OUTPUTS and path.is_file() and os.access(path, os.R_OK)
    trial.report_refused = (status == 2 and len(errors) == 1 and named in errors[0]) or rebuilt
    trial.repair_finished = cli("store", "repair", str(work))[0] == 0
    trial.clean_after_repair = cli("store", "check", str(work))[0] == 0
    cli("run", str(config_file), "--out", str(work), "--no-progress")
    trial.complete_after_rerun = complete(work, config)
    return trial


def loss_trials(stores: dict[str, Path], root: Path, config: ExperimentConfig, rng: random.Random,
                unreadable: bool) -> list[LossTrial]:
    """Every loss of every kind of file in every base store (a random file of the kind); ``unreadable``: also
    the losses that need this process to be refused a ``chmod 000`` file."""
    config_file = root / "config.yaml"
    config_file.write_text(config.to_yaml())
    trials = []
    for variant, base in sorted(stores.items()):
        for loss in LOSSES:
            if loss in UNREADABLE and not unreadable:
                continue
            for kind, pattern in LOST_FILES.items():
                if loss == "folder unreadable (chmod 000)" and "/" not in pattern:
                    continue
                trial = LossTrial(loss, kind, variant, rng.choice(_relative(base, pattern)))
                work = root / f"loss-{len(trials)}"
                try:
                    trials.append(run_loss_trial(trial, base, work, config, config_file))
                except Exception as exc:  # a crash is a failed trial, reported; the campaign goes on
                    print(f"{loss} {kind} ({variant}): crashed: {type(exc).__name__}: {exc}")
                    trials.append(trial)
                _writable(work)
                shutil.rmtree(work, ignore_errors=True)
    return trials


def _writable(root: Path) -> None:
    """Give this process back every folder and file under ``root`` (chmod), so it can be removed."""
    if root.is_symlink() or not root.exists():
        return
    root.chmod(0o700 if root.is_dir() else 0o600)
    if root.is_dir():
        for child in root.iterdir():
            _writable(child)


def readable_when_mode_000() -> bool:
    """Does this process read a file whose mode is 000 (root with CAP_DAC_OVERRIDE does)?"""
    with tempfile.NamedTemporaryFile() as handle:
        os.chmod(handle.name, 0)
        try:
            open(handle.name, "rb").close()
            return True
        except PermissionError:
            return False


def without_read_override() -> str | None:
    """Re-execute this script under ``setpriv`` without the capabilities that read any file, where it has them;
    returns why unreadable files cannot be tried here (None when they can)."""
    if not readable_when_mode_000():
        return None
    if os.environ.get("STORE_FAULTS_DROPPED") or shutil.which("setpriv") is None:
        return "this process reads chmod 000 files (root with CAP_DAC_OVERRIDE) and setpriv cannot drop it"
    os.environ["STORE_FAULTS_DROPPED"] = "1"
    os.execvp("setpriv", ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", sys.executable, *sys.argv])
    return None  # (not reached)


def print_loss_table(after: list[LossTrial], before: list[LossTrial] | None) -> None:
    """One row per (loss, kind of file), counts over the base stores; ``before -> after`` where both ran."""
    steps = ("named", "report_refused", "repair_finished", "clean_after_repair", "complete_after_rerun")
    heads = ("named by check", "report refused (or rebuilt an output)", "repair finished", "clean after repair",
             "re-run complete")

    def count(trials: list[LossTrial], loss: str, kind: str, step: str) -> str:
        rows = [t for t in trials if (t.loss, t.kind) == (loss, kind)]
        return f"{sum(getattr(t, step) for t in rows)}/{len(rows)}" if rows else "-"

    print("| loss | file | " + " | ".join(heads) + " |")
    print("|---|---|" + "---:|" * len(steps))
    for loss in LOSSES:
        for kind in LOST_FILES:
            if not any((t.loss, t.kind) == (loss, kind) for t in after):
                continue
            cells = [count(after, loss, kind, step) if before is None else
                     f"{count(before, loss, kind, step)} -> {count(after, loss, kind, step)}" for step in steps]
            print(f"| {loss} | {kind} | " + " | ".join(cells) + " |")
    for label, trials in (("before", before), ("after", after)):
        if trials:
            print(f"{label}: " + ", ".join(f"{head} {sum(getattr(t, s) for t in trials)}/{len(trials)} "
                                          f"({100 * sum(getattr(t, s) for t in trials) / len(trials):.0f} %)"
                                          for head, s in zip(heads, steps)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", choices=["bytes", "gone"], default="bytes",
                        help="random byte damage (default) or lost files")
    parser.add_argument("--trials", type=int, default=100, help="byte-damage trials")
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", type=Path, default=None,
                        help="an older checkout: run the lost-file trials on it too (PYTHONPATH), print before -> after")
    parser.add_argument("--json", type=Path, default=None, help="write the lost-file trials here (for --before)")
    args = parser.parse_args()
    if args.faults == "bytes":
        return byte_damage(args)
    skipped = without_read_override()
    before = None
    if args.before is not None:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "before.json"
            command = [sys.executable, str(Path(__file__).resolve()), "--faults", "gone", "--json", str(out),
                       "--problems", str(args.problems), "--samples", str(args.samples), "--seed", str(args.seed)]
            subprocess.run(command, env={**os.environ, "PYTHONPATH": str(args.before.resolve())}, check=True)
            before = [LossTrial(**row) for row in json.loads(out.read_text())]
    config = experiment_config(args.problems, args.samples)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, shared_engines():
        trials = loss_trials(bases(Path(tmp), config), Path(tmp), config, random.Random(args.seed), skipped is None)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(t) for t in trials]))
        return None
    print(f"{len(trials)} lost files ({args.problems} problems x {args.samples} samples, 2 verifiers, chunked and "
          f"compacted stores; {time.perf_counter() - began:.0f} s)" + (f"; unreadable files not tried: {skipped}"
                                                                       if skipped else ""))
    print_loss_table(trials, before)
    return None


def byte_damage(args: argparse.Namespace) -> None:
    """The random byte-damage campaign (``--faults bytes``)."""
    config = experiment_config(args.problems, args.samples)
    rng = random.Random(args.seed)
    trials: list[tuple[str, Trial]] = []
    with tempfile.TemporaryDirectory() as tmp, shared_engines():  # the model loads once for every re-run
        stores = bases(Path(tmp), config)
        for number in range(args.trials):
            variant = rng.choice(sorted(stores))
            try:
                trial = run_trial(stores[variant], Path(tmp) / f"trial-{number}", config, rng)
            except Exception as exc:  # a crash is a failed trial, reported; the campaign goes on
                trial = Trial([f"? ({type(exc).__name__}: {exc})"], [], ["crashed"], False, False)
            trials.append((variant, trial))
            shutil.rmtree(Path(tmp) / f"trial-{number}", ignore_errors=True)
            if not trial.passed and sum(not t.passed for _, t in trials) <= 5:
                print(f"trial {number} ({variant}) FAILED: damaged {trial.damaged}, found {trial.found}, "
                      f"clean after repair {trial.clean_after_repair}, complete after re-run {trial.complete_after_rerun}")
    n = len(trials)
    kinds = Counter((v, t.damaged[0].split("/")[0].split(".")[0]) for v, t in trials)
    print(f"{n} trials, one damaged byte each ({args.problems} problems x {args.samples} samples, 2 verifiers)")
    print("damaged: " + ", ".join(f"{kind} ({variant}) {count}" for (variant, kind), count in sorted(kinds.items())))
    print("showed as: " + ", ".join(f"{how} {count}" for how, count in Counter(t.how[0] for _, t in trials).items()))
    for label, ok in (("check named exactly the damaged file", lambda t: t.named_exactly),
                      ("check clean after repair", lambda t: t.clean_after_repair),
                      ("re-run complete, no duplicates", lambda t: t.complete_after_rerun)):
        print(f"{label}: {sum(ok(t) for _, t in trials)}/{n}")
    print(f"rows kept by salvage (files that failed to read): {sum(t.rows_kept for _, t in trials)}")
    for step in ("check", "repair", "re-run"):
        values = [t.seconds[step] for _, t in trials if step in t.seconds] or [float("nan")]
        print(f"{step}: median {statistics.median(values):.2f} s, max {max(values):.2f} s")


if __name__ == "__main__":
    main()
