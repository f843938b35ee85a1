"""Random byte damage in an experiment store: found, repaired, redone?

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
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import re
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
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
