"""GPU-seconds that do not depend on run order: engine starts counted apart and shared by the points served.

The stage records here are of the shapes the backends write (``runs[].sampled[gen]``: ``wall_s``,
``gpu_s``, and ``engine_start_s`` or Ray's ``workers_ready_s`` in the stage that started the engine);
the real path (Ray workers holding logical GPUs) is in ``test_sweep_ray.py``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from monkeybarrel.orchestrator.sweep.accounting import gpu_seconds, split_stage, with_starts


def stage(generation_s: float, gpus: float = 1.0, start_s: float | None = None, field: str = "engine_start_s",
          inside_s: float | None = None) -> dict:
    """A sample-stage record: ``start_s`` of engine start (``inside_s`` of it within the stage), then generation."""
    inside = (start_s or 0.0) if inside_s is None else inside_s
    wall = generation_s + inside
    record = {"samples": 64, "wall_s": wall, "gpu_s": gpus * wall}
    if start_s is not None:
        record[field] = start_s
    return record


def write_point(root: Path, name: str, runs: list[dict[str, dict]], engines: dict[str, str] | None = None) -> dict:
    (root / name).mkdir(parents=True)
    (root / name / "manifest.json").write_text(json.dumps({"runs": [{"sampled": r} for r in runs]}))
    record = {"name": name, "engines": sorted(set((engines or {}).values()))}
    if engines is not None:
        record["generator_engines"] = engines
    return record


GENERATION = {"a": 6.6, "b": 6.3, "c": 6.5}


@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
def test_identical_points_cost_the_same_whichever_ran_first(tmp_path, order):
    """One H100 engine (25 s start) serving three points: the first carries 31.6 GPU-s in its stage record."""
    records = []
    for position, name in enumerate(order):
        start = 25.0 if position == 0 else None
        records.append(write_point(tmp_path, name, [{"g": stage(GENERATION[name], start_s=start)}], {"g": "m (vllm)"}))
    shared = gpu_seconds(tmp_path, records)
    for name in "abc":
        assert shared["points"][name]["generation_gpu_s"] == pytest.approx(GENERATION[name], abs=1e-3)
        assert shared["points"][name]["start_share_gpu_s"] == pytest.approx(25.0 / 3, abs=1e-3)
        assert shared["points"][name]["gpu_s"] == pytest.approx(GENERATION[name] + 25.0 / 3, abs=1e-3)
    held = sum(GENERATION.values()) + 25.0  # nothing lost or counted twice
    assert sum(p["gpu_s"] for p in shared["points"].values()) == pytest.approx(held, abs=0.01)
    assert shared["engines"]["m (vllm)"] == {"start_s": 25.0, "start_gpu_s": 25.0, "points": list(order)}


def test_a_tensor_parallel_start_counts_every_gpu(tmp_path):
    records = [write_point(tmp_path, "first", [{"g": stage(10.0, gpus=4, start_s=60.0)}], {"g": "70b (vllm)"}),
               write_point(tmp_path, "second", [{"g": stage(10.0, gpus=4)}], {"g": "70b (vllm)"})]
    shared = gpu_seconds(tmp_path, records)
    assert shared["engines"]["70b (vllm)"]["start_gpu_s"] == pytest.approx(240.0)
    assert shared["points"]["first"]["gpu_s"] == shared["points"]["second"]["gpu_s"] == pytest.approx(40.0 + 120.0)


def test_ray_workers_ready_counts_as_start_up_to_the_stages_own_gpu_seconds():
    """``workers_ready_s`` counts from before the data load (which the stage's GPU-seconds leave out): the
    stage's first ``workers_ready_s`` seconds are start, never more than the stage held."""
    generation, start, start_s = split_stage(stage(5.0, gpus=2, start_s=30.0, field="workers_ready_s"))
    assert (generation, start, start_s) == (pytest.approx(10.0), pytest.approx(60.0), 30.0)
    generation, start, start_s = split_stage(stage(5.0, gpus=2, start_s=30.0, field="workers_ready_s", inside_s=20.0))
    assert (generation, start, start_s) == (pytest.approx(0.0), pytest.approx(50.0), 30.0)


def test_a_point_with_two_engines_pays_a_share_of_each(tmp_path):
    records = [write_point(tmp_path, "both", [{"big": stage(8.0, start_s=40.0), "small": stage(2.0, start_s=10.0)}],
                           {"big": "8b (vllm)", "small": "1b (vllm)"}),
               write_point(tmp_path, "big-only", [{"big": stage(8.0)}], {"big": "8b (vllm)"})]
    shared = gpu_seconds(tmp_path, records)
    assert shared["points"]["both"]["start_share_gpu_s"] == pytest.approx(40.0 / 2 + 10.0)
    assert shared["points"]["big-only"]["start_share_gpu_s"] == pytest.approx(20.0)


def test_every_start_of_an_engine_is_shared_retries_and_later_runs_included(tmp_path):
    records = [write_point(tmp_path, "p1", [{"g": stage(5.0, start_s=30.0)}, {"g": stage(1.0, start_s=30.0)}],
                           {"g": "m (vllm)"}),
               write_point(tmp_path, "p2", [{"g": stage(6.0)}], {"g": "m (vllm)"})]
    shared = gpu_seconds(tmp_path, records)
    assert shared["engines"]["m (vllm)"]["start_gpu_s"] == pytest.approx(60.0)
    assert shared["points"]["p1"]["gpu_s"] == pytest.approx(6.0 + 30.0)
    assert shared["points"]["p2"]["gpu_s"] == pytest.approx(6.0 + 30.0)


def test_cpu_points_have_no_gpu_seconds_and_old_manifests_use_the_points_one_engine(tmp_path):
    cpu = write_point(tmp_path, "cpu", [{"g": {"samples": 4, "wall_s": 3.0}}], {"g": "smol (embedded)"})
    old = write_point(tmp_path, "old", [{"g": stage(4.0, start_s=20.0)}])
    old["engines"] = ["m (vllm)"]
    newer = write_point(tmp_path, "newer", [{"g": stage(4.0)}], {"g": "m (vllm)"})
    missing = {"name": "never-started"}
    shared = gpu_seconds(tmp_path, [cpu, old, newer, missing])
    assert set(shared["points"]) == {"old", "newer"}
    assert shared["points"]["old"]["gpu_s"] == shared["points"]["newer"]["gpu_s"] == pytest.approx(14.0)
    engines = with_starts({"m (vllm)": {"starts": 1, "points": ["old", "newer"]},
                           "smol (embedded)": {"starts": 1, "points": ["cpu"]}}, shared)
    assert engines["m (vllm)"]["shared_by"] == 2 and engines["m (vllm)"]["start_gpu_s"] == pytest.approx(20.0)
    assert "start_gpu_s" not in engines["smol (embedded)"]
