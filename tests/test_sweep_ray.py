"""``sweep --ray-address``: a sweep's sampling on Ray actors (2 local CPU workers), stores written by the driver;
GPU-seconds of workers holding (logical) GPUs, with the workers' start shared by the points they served."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

ray = pytest.importorskip("ray")

from conftest import tiny_config  # noqa: E402
from monkeybarrel.orchestrator.cli.main import main  # noqa: E402
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore  # noqa: E402
from monkeybarrel.orchestrator.sweep.driver import on_ray, plan  # noqa: E402
from monkeybarrel.orchestrator.sweep.spec import sweep_from_dict  # noqa: E402
from monkeybarrel.orchestrator.sweep.status import sweep_status  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 2**20)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def test_generators_are_wrapped_into_the_ray_backend_with_their_options():
    base = tiny_config(problems=2, samples=2, max_tokens=8)
    config = sweep_from_dict({"base": base, "axes": {"generators[0].temperature": [0.5]}}).points[0].config
    wrapped = on_ray(config, "ray://head:10001", {"num_gpus_per_worker": 1})
    spec = wrapped.generators[0]
    assert spec.backend == "ray" and spec.temperature == 0.5
    assert spec.options == {"num_gpus_per_worker": 1, "backend": "embedded", "backend_options": {"num_threads": 1},
                            "address": "ray://head:10001"}
    assert on_ray(wrapped, "auto").generators[0].options["address"] == "ray://head:10001"  # a ray generator keeps its own


def test_one_ray_actor_pool_serves_points_with_other_sampling_settings():
    base = tiny_config(problems=2, samples=2, max_tokens=8)
    sweep = sweep_from_dict({"base": base, "axes": [{"zip": {
        "task.options.difficulty": [1, 2, 1], "generators[0].temperature": [0.0, 0.0, 1.5]}}]})
    local = plan(sweep)  # a pooled local sampler is rebound to each point's spec: one group
    assert len({p.group for p in local}) == 1
    on_cluster = plan(sweep, ray_address="auto")
    groups = [p.group for p in on_cluster]
    # tasks carry each point's spec to the workers (RaySampler.rebind): one actor pool for all three points
    assert len(set(groups)) == 1
    assert {label for p in on_cluster for label in p.engines.values()} == {"smollm2-135m-instruct (ray: embedded)"}


def test_a_sweep_on_two_local_ray_workers_starts_one_actor_pool_and_the_driver_writes_the_stores(local_ray, tmp_path):
    base = tiny_config(name="base", problems=2, samples=3, max_tokens=8)
    sweep_file = tmp_path / "ray.yaml"
    sweep_file.write_text(yaml.safe_dump({"base": base, "axes": {"task.options.difficulty": [1, 2]},
                                          "ray": {"requests_per_task": 1}, "retry": {"attempts": 1}}, sort_keys=False))
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--ray-address", local_ray, "--no-progress"]) == 0
    manifest = json.loads((out / "sweep.json").read_text())
    assert [r["state"] for r in manifest["points"]] == ["done", "done"]
    assert manifest["engines"] == {"smollm2-135m-instruct (ray: embedded)": {
        "starts": 1, "points": ["difficulty=1", "difficulty=2"]}}
    assert manifest["runs"][-1]["ray_address"] == local_ray
    for record in manifest["points"]:
        store = ExperimentStore(out / record["name"])  # written by this process, the driver
        table = store.candidates()
        keys = Counter(zip(table.column("problem_id").to_pylist(), table.column("sample_index").to_pylist()))
        assert len(keys) == 6 and max(keys.values()) == 1 and set(table.column("generator_id").to_pylist()) == {"smol"}
        assert all(table.column("text").to_pylist())
        config = yaml.safe_load((out / record["name"] / "config.yaml").read_text())
        assert config["generators"][0]["backend"] == "ray"
        assert config["generators"][0]["options"]["address"] == local_ray


def test_gpu_seconds_share_the_workers_start_instead_of_charging_the_first_point(local_ray, tmp_path, capsys):
    """Ray workers holding a logical GPU each count GPUs x seconds alive, start included (as on real GPUs)."""
    base = tiny_config(name="base", problems=2, samples=2, max_tokens=8)
    sweep_file = tmp_path / "gpu.yaml"
    sweep_file.write_text(yaml.safe_dump({"base": base, "axes": {"generators[0].temperature": [0.3, 0.6, 1.0]},
                                          "ray": {"num_workers": 1, "num_gpus_per_worker": 1},
                                          "retry": {"attempts": 1}}, sort_keys=False))
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--ray-address", local_ray, "--no-progress"]) == 0
    raw = {}
    for record in json.loads((out / "sweep.json").read_text())["points"]:
        run = json.loads((out / record["name"] / "manifest.json").read_text())["runs"][-1]["sampled"]["smol"]
        raw[record["name"]] = run
    first, *others = raw.values()
    assert "workers_ready_s" in first and not any("workers_ready_s" in r for r in others)
    assert first["gpu_s"] > 1.5 * max(r["gpu_s"] for r in others)  # the first point's stage holds the start
    rows = {r["name"]: r for r in sweep_status(out)["points"]}
    shares = {r["start_share_gpu_s"] for r in rows.values()}
    assert len(shares) == 1 and shares.pop() > 0  # every point pays the same share of the one start
    assert sum(r["gpu_s"] for r in rows.values()) == pytest.approx(sum(r["gpu_s"] for r in raw.values()), abs=0.01)
    spread = max(r["gpu_s"] for r in rows.values()) - min(r["gpu_s"] for r in rows.values())
    assert spread < first["gpu_s"] - max(r["gpu_s"] for r in others)  # order no longer decides the cost
    engine = sweep_status(out)["engines"]["smollm2-135m-instruct (ray: embedded)"]
    assert engine["starts"] == 1 and engine["shared_by"] == 3 and engine["start_gpu_s"] > 0
    capsys.readouterr()
    assert main(["sweep", "status", str(out)]) == 0
    assert "GPU-s shared by its points" in capsys.readouterr().out
    assert main(["sweep", "report", str(out), "--budget", "gpu_s"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert {p["point"]: p["gpu_s"] for p in report["tasks"][0]["points"]} == \
        pytest.approx({name: row["gpu_s"] for name, row in rows.items()}, abs=0.01)
    markdown = (out / "report.md").read_text()
    assert "start GPU-s per point" in markdown and "equal share of its engines' start GPU-seconds" in markdown
