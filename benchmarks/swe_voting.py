"""Generated-test voting throughput: T tests x P patches through the container pool vs one `docker run` each.

Both sides do the same work per (patch, test) execution: reset the checkout to the base commit,
apply the patch, run the test script, all inside a network-less container with the same limits.
The pool starts one container per patch and runs the tests by exec (``ContainerPool``, cache off);
the baseline starts a fresh container for every execution (``docker run --rm``). Runs alternate
and each side keeps its best of ``--repeats``. Prints executions/s for both and the ratio.

    python benchmarks/swe_voting.py [--instance inflection__inflection-0004] [--tests 6] [--workers 2]
    python benchmarks/swe_voting.py --report runs/swe_taskset   # add the SWE section to a run's report.md
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from monkeybarrel.experiments.swe_taskset.build_repos import HERE as TASKSET
from monkeybarrel.kits.swebench.containers import ContainerPool
from monkeybarrel.kits.swebench.predictions import read_predictions
from monkeybarrel.kits.swebench.schema import load_instances
from monkeybarrel.kits.swebench.voting import run_vote_matrix, script_execution
from monkeybarrel.sandbox.docker_backend import session_isolation


def tests_for(n: int) -> list[str]:
    """``n`` distinct small reproduction-style scripts (import the package, check something, exit 0/2)."""
    return [f"import sys, importlib.util\nmods = [m for m in ('inflection', 'parse', 'toolz') if importlib.util.find_spec(m)]\n"
            f"value = sum(len(m) for m in mods) + {i}\nprint('probe', {i}, value)\nsys.exit(0 if value % 2 else 2)\n"
            for i in range(n)]


def pooled(instance, patches, tests, workers: int) -> tuple[float, int, int]:
    pool = ContainerPool(cache_dir=None, max_workers=workers)
    began = time.perf_counter()
    matrix = run_vote_matrix(pool, instance.image_name, instance.repo_dir, instance.base_commit, patches, tests, 60)
    elapsed = time.perf_counter() - began
    assert matrix.applied.all(), "every benchmark patch must apply"
    return elapsed, pool.stats.executions, pool.stats.containers


def docker_run_each(instance, patches, tests, workers: int) -> tuple[float, int, int]:
    import docker

    client = docker.from_env()
    options = session_isolation()
    pairs = [(p, t) for p in [*dict.fromkeys(patches), None] for t in tests]

    def one(pair) -> int:
        patch, test = pair
        execution = script_execution(test)
        apply = ("cat > /tmp/p.diff <<'MB_PATCH'\n" + patch + "MB_PATCH\ngit apply /tmp/p.diff && ") if patch else ""
        script = (f"git -c advice.detachedHead=false checkout -q -f {instance.base_commit} && git clean -fdxq && "
                  f"{apply}mkdir -p /tmp/mb && cat > {execution.files[0][0]} <<'MB_TEST'\n{test}MB_TEST\n{execution.command}")
        try:
            client.containers.run(instance.image_name, ["bash", "-c", script], working_dir=instance.repo_dir,
                                  remove=True, **options)
            return 0
        except docker.errors.ContainerError as exc:
            return exc.exit_status

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as executor:
        codes = list(executor.map(one, pairs))
    assert all(c in (0, 2) for c in codes), f"unexpected exit codes {codes}"
    return time.perf_counter() - began, len(pairs), len(pairs)


def swe_report(run_dir: str, image: str = "monkeybarrel/swe-taskset:1") -> str:
    """Markdown: selection rows, vote ties, container counts (docker events) and wall time of a run."""
    import json
    import subprocess
    from datetime import datetime
    from pathlib import Path

    import numpy as np

    from monkeybarrel.orchestrator.experiment import Experiment
    from monkeybarrel.kits.swebench.voting import expected_tie_accuracy

    experiment = Experiment(run_dir)
    metrics, manifest = experiment.metrics(), experiment.manifest()
    data, labels = experiment.selection_data(), experiment.labels_array()
    lines = ["", "## SWE-bench (benchmarks/swe_voting.py --report)", "",
             f"{data.n_problems} instances, {data.n_candidates} candidates "
             f"({', '.join(f'{g}: {int((data.generator_id == g).sum())}' for g in sorted(set(data.generator_id)))}), "
             f"resolved candidates {int(labels.sum())}.", "", "| method | resolved |", "|---|---|"]
    for name, row in metrics["selection"].items():
        lines.append(f"| {name} | {row['accuracy']:.3f} |")
    if "test_votes" in data.verifiers:
        votes = data.verifier_scores("test_votes")
        ties = [expected_tie_accuracy(votes[data.groups == g], labels[data.groups == g]) for g in range(data.n_problems)]
        lines.append(f"| test voting, expected over tied maxima | {np.mean(ties):.3f} |")
        lines.append(f"\nvote columns: {int(np.isfinite(votes).sum())} finite of {len(votes)}; "
                     f"max votes per problem: {[int(np.nanmax(votes[data.groups == g])) if np.isfinite(votes[data.groups == g]).any() else None for g in range(data.n_problems)]}")
    run = manifest["runs"][-1]
    began = datetime.fromisoformat(run["started"]).timestamp()
    ended = datetime.fromisoformat(run.get("finished", run["started"])).timestamp()
    events = subprocess.run(["docker", "events", "--since", str(int(began)), "--until", str(int(ended) + 1),
                             "--filter", "type=container", "--filter", "event=start", "--filter", f"image={image}",
                             "--format", "{{.ID}}"], capture_output=True, text=True, timeout=60).stdout.split()
    lines += ["", f"containers started during the run ({image}, from docker events): {len(events)}",
              f"run wall time: {ended - began:.0f} s; stage wall times: {manifest.get('costs', {}).get('stage_wall_s')}"]
    for name in ("state_machine", "barrel_of_monkeys"):  # the state-machine verifiers' records in the store
        folder = Path(run_dir) / "artifacts" / name
        records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
        if records:
            events_ = [e["event"] for r in records for e in r["events"]]
            lines.append(f"state machine {name}: {len(records)} problems, attempts {[r['attempts'] for r in records]}, "
                         f"valid choices {sum(r['selected'] is not None for r in records)}, "
                         f"tests run {sum(len(r['tests']) for r in records)}, format errors {events_.count('format_error')}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", help="a run directory: append the SWE section to its report.md and print it")
    parser.add_argument("--instance", default="inflection__inflection-0004")
    parser.add_argument("--tests", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.report:
        from pathlib import Path

        section = swe_report(args.report)
        report = Path(args.report) / "report.md"
        text = report.read_text()
        marker = "\n## SWE-bench (benchmarks/swe_voting.py --report)"
        report.write_text(text.split(marker)[0].rstrip("\n") + "\n" + section)
        print(section)
        return
    [instance] = load_instances(TASKSET / "tasks.jsonl", instance_ids=[args.instance])
    patches = [p["model_patch"] for name in ("gold", "mutants")
               for p in read_predictions(TASKSET / "predictions" / f"{name}.jsonl").get(instance.instance_id, [])]
    tests = tests_for(args.tests)
    best = {"pool": None, "docker run": None}
    for _ in range(args.repeats):
        for name, fn in (("pool", pooled), ("docker run", docker_run_each)):
            elapsed, executions, containers = fn(instance, patches, tests, args.workers)
            if best[name] is None or elapsed < best[name][0]:
                best[name] = (elapsed, executions, containers)
    print(f"instance {instance.instance_id}: {len(set(patches))} patches + unpatched, {len(tests)} tests, "
          f"{args.workers} workers, best of {args.repeats}")
    for name, (elapsed, executions, containers) in best.items():
        print(f"  {name:<11} {executions:4d} executions in {elapsed:7.2f} s = {executions / elapsed:6.2f} exec/s "
              f"({containers} containers)")
    pool_rate = best["pool"][1] / best["pool"][0]
    run_rate = best["docker run"][1] / best["docker run"][0]
    print(f"  ratio pool / docker run: {pool_rate / run_rate:.2f}x executions per second")


if __name__ == "__main__":
    main()
