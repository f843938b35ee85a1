"""Where a sweep's engines run: devices, GPUs an engine needs, lane placement, shards by engine, shard manifests."""

from __future__ import annotations

import json
from collections import deque

import pytest

from conftest import tiny_config
from monkeybarrel.core.config import ConfigError, GeneratorSpec
from monkeybarrel.orchestrator.sweep.driver import plan
from monkeybarrel.orchestrator.sweep.manifest import merge, read_manifest
from monkeybarrel.orchestrator.sweep.placement import (Devices, Group, Placement, engine_gpus, find_devices,
                                                       group_need, visible_gpus)
from monkeybarrel.orchestrator.sweep.shards import parse_shard, split
from monkeybarrel.orchestrator.sweep.spec import sweep_from_dict


# ---- devices -------------------------------------------------------------------------------

@pytest.mark.parametrize("listed, expected", [("0,1,2,3", ["0", "1", "2", "3"]), ("2, 5", ["2", "5"]), ("", []),
                                              ("-1", []), ("GPU-1a2b,GPU-3c4d", ["GPU-1a2b", "GPU-3c4d"])])
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch, listed, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
    assert visible_gpus() == expected


@pytest.mark.parametrize("setting, visible, ids, gpu", [
    (None, ["0", "1", "2", "3"], ("0", "1", "2", "3"), True),   # auto: every visible GPU
    ("auto", [], (), False),                                     # a CPU machine: no device, no lanes
    ("2", ["4", "5", "6"], ("4", "5"), True),                    # the first two visible ones
    ("3", [], ("0", "1", "2"), False),                           # CPU slots
    ("1,3", ["0", "1", "2", "3"], ("1", "3"), True),
    ("0,1", [], ("0", "1"), False),
])
def test_gpus_setting(setting, visible, ids, gpu):
    devices = find_devices(setting, visible)
    assert devices.ids == ids and devices.gpu is gpu


@pytest.mark.parametrize("setting, visible, words", [
    ("5", ["0", "1"], ["only 2 GPU(s) are visible"]), ("0", [], ["at least 1"]), ("1,1", [], ["distinct"]),
    ("0,7", ["0", "1"], ["device(s) 7 are not visible", "visible: 0,1"]), ("two", [], ["expected auto, a count"]),
])
def test_bad_gpus_settings_name_the_flag(setting, visible, words):
    with pytest.raises(ConfigError) as caught:
        find_devices(setting, visible)
    assert f"--gpus {setting}" in str(caught.value) and all(w in str(caught.value) for w in words)


def test_a_lane_sees_only_its_gpus_and_cpu_slots_share_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert Devices(("0", "1", "2", "3"), gpu=True).lane_env(["2", "3"])["CUDA_VISIBLE_DEVICES"] == "2,3"
    cpu = Devices(("0", "1"), gpu=False).lane_env(["1"])
    assert "CUDA_VISIBLE_DEVICES" not in cpu and int(cpu["OMP_NUM_THREADS"]) >= 1 and cpu["MONKEYBARREL_DEVICES"] == "1"


@pytest.mark.parametrize("backend, options, gpus", [
    ("vllm", {}, 1), ("vllm", {"tensor_parallel_size": 4}, 4),
    ("vllm", {"tensor_parallel_size": 2, "engine_kwargs": {"pipeline_parallel_size": 2}}, 4),
    ("embedded", {"num_threads": 1}, 1), ("openai", {"base_url": "http://127.0.0.1:9/v1"}, 1), ("ray", {}, None),
])
def test_gpus_an_engine_needs(backend, options, gpus):
    assert engine_gpus(GeneratorSpec(id="g", backend=backend, model="m", options=options)) == gpus


def test_a_group_needs_the_sum_of_its_engines_and_ray_takes_every_device():
    assert group_need({"a": 1, "b": 2}, devices=4) == 3
    assert group_need({"a": None}, devices=4) == 4
    assert group_need({}, devices=4) == 1


# ---- lanes ---------------------------------------------------------------------------------

def groups(*spec: tuple[int, int, float]) -> list[Group]:
    """(need, points, weight) per group; points are numbered across groups in order."""
    out, first = [], 0
    for i, (need, points, weight) in enumerate(spec):
        out.append(Group(f"g{i}", need, deque(range(first, first + points)), weight))
        first += points
    return out


def start_all(placement: Placement) -> list[tuple[str, list[str]]]:
    started = []
    while (choice := placement.next_lane()) is not None:
        started.append((choice[0].name, choice[1]))
    return started


def test_four_models_on_four_gpus_start_at_once_heaviest_first():
    placement = Placement(groups((1, 2, 1.0), (1, 2, 8.0), (1, 2, 3.0), (1, 2, 2.0)), ["0", "1", "2", "3"])
    assert start_all(placement) == [("g1", ["0"]), ("g2", ["1"]), ("g3", ["2"]), ("g0", ["3"])]
    assert placement.free == []


def test_a_tensor_parallel_group_waits_for_its_gpus_and_smaller_groups_fill_in_meanwhile():
    grouped = groups((1, 1, 5.0), (4, 2, 9.0), (1, 1, 1.0))
    placement = Placement(grouped, ["0", "1", "2", "3"])
    assert start_all(placement) == [("g1", ["0", "1", "2", "3"])]
    placement.release(grouped[1], ["0", "1", "2", "3"])
    grouped[1].waiting.clear()
    assert start_all(placement) == [("g0", ["0"]), ("g2", ["1"])]
    placement = Placement(groups((4, 2, 9.0), (1, 1, 5.0)), ["0", "1", "2"])  # fits nowhere: the others still run
    assert start_all(placement) == [("g1", ["0"])]


def test_free_gpus_take_another_engine_of_a_model_with_points_waiting():
    one = groups((1, 8, 8.0))
    assert start_all(Placement(one, ["0", "1", "2", "3"])) == [("g0", ["0"]), ("g0", ["1"]), ("g0", ["2"]), ("g0", ["3"])]
    few = groups((1, 3, 3.0))
    assert len(start_all(Placement(few, ["0", "1", "2", "3"]))) == 3  # never more lanes than points
    single = groups((1, 1, 1.0), (1, 1, 1.0))
    assert len(start_all(Placement(single, ["0", "1", "2", "3"]))) == 2  # one point each: no second engine
    mixed = groups((1, 6, 6.0), (1, 2, 2.0))
    started = start_all(Placement(mixed, ["0", "1", "2", "3"]))
    assert [name for name, _ in started] == ["g0", "g1", "g0", "g0"]


def test_a_finished_lane_frees_its_gpus_for_the_next_group():
    grouped = groups((2, 1, 3.0), (2, 1, 2.0), (2, 1, 1.0))
    placement = Placement(grouped, ["0", "1", "2", "3"])
    assert start_all(placement) == [("g0", ["0", "1"]), ("g1", ["2", "3"])]
    grouped[1].waiting.clear()
    placement.release(grouped[1], ["2", "3"])
    assert start_all(placement) == [("g2", ["2", "3"])] and placement.busy()


# ---- shards --------------------------------------------------------------------------------

def planned_grid(models: dict[str, list[float]]):
    """A real sweep plan: one engine group per ``max_batch`` value (an engine option), points at temperatures."""
    base = tiny_config(problems=2, samples=2, max_tokens=8)
    axes = [{"zip": {"generators[0].options.max_batch": [int(m) for m, temps in models.items() for _ in temps],
                     "generators[0].temperature": [t for temps in models.values() for t in temps]}}]
    return plan(sweep_from_dict({"base": base, "axes": axes}))


@pytest.mark.parametrize("models, shards, starts", [
    ({"8": [0.1, 0.2, 0.3, 0.4], "16": [0.1, 0.2, 0.3, 0.4]}, 2, 2),           # as many groups as shards
    ({"8": [0.1, 0.2], "16": [0.1, 0.2], "32": [0.1, 0.2]}, 2, 3),             # more groups than shards
    ({"8": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]}, 4, 4),                   # one model, more shards than groups
    ({"8": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "16": [0.1]}, 2, 3),                # one model outweighs a shard's share
    ({"8": [0.1], "16": [0.2]}, 3, 2),                                         # a shard gets nothing
])
def test_shards_cover_every_point_once_balanced_with_few_engine_starts(models, shards, starts):
    planned = planned_grid(models)
    parts = split(planned, shards)
    again = split(planned_grid(models), shards)  # every shard computes the same split from the sweep alone
    assert [[p.point.id for p in part] for part in again] == [[p.point.id for p in part] for part in parts]
    assert sorted(p.point.id for part in parts for p in part) == sorted(p.point.id for p in planned)
    sizes = sorted(len(part) for part in parts)
    assert sizes[-1] - sizes[0] <= max(1, len(planned) // shards)  # balanced by work (points weigh the same here)
    # a shard runs each of its groups in one shared_engines() block: one start per (shard, engine)
    assert sum(len({p.group for p in part}) for part in parts) == starts


def test_groups_are_not_split_without_need():
    parts = split(planned_grid({"8": [0.1, 0.2], "16": [0.1, 0.2]}), 2)
    assert [len({p.group for p in part}) for part in parts] == [1, 1]  # one model per shard, one engine start each


@pytest.mark.parametrize("text, expected", [("1/4", (1, 4)), (" 4 / 4 ", (4, 4)), ("1/1", (1, 1))])
def test_shard_flag(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/4", "5/4", "1-4", "a/b", "", "1/0"])
def test_bad_shard_flags_say_what_is_expected(text):
    with pytest.raises(ConfigError, match=r"--shard .*expected I/N with 1 <= I <= N"):
        parse_shard(text)


# ---- shard manifests -----------------------------------------------------------------------

def record(pid: str, state: str, updated: str, **extra) -> dict:
    return {"id": pid, "name": f"p{pid}", "index": int(pid), "state": state, "updated": updated, **extra}


def test_shard_manifests_merge_by_latest_record_and_sum_engine_starts():
    main = {"name": "s", "claimed": "2026-01-01T00:00:00", "created": "2026-01-01T00:00:00",
            "points": [record("1", "done", "2026-01-01T01:00:00"), record("2", "pending", "")],
            "engines": {"m (vllm)": {"starts": 1, "points": ["p1"]}}, "runs": [{"started": "2026-01-01T00:00:01"}]}
    shard = {"name": "s", "claimed": "2026-01-02T00:00:00", "created": "2026-01-02T00:00:00",
             "points": [record("1", "done", "2026-01-01T01:00:00"), record("2", "failed", "2026-01-02T01:00:00"),
                        record("3", "pending", "")],
             "engines": {"m (vllm)": {"starts": 1, "points": ["p2"]}, "n (vllm)": {"starts": 2, "points": ["p3"]}},
             "runs": [{"started": "2026-01-02T00:00:01"}]}
    later = {**shard, "points": [record("2", "done", "2026-01-03T00:00:00")]}
    merged = merge([main, shard])
    assert [(r["id"], r["state"]) for r in merged["points"]] == [("1", "done"), ("2", "failed"), ("3", "pending")]
    assert merged["engines"] == {"m (vllm)": {"starts": 2, "points": ["p1", "p2"]},
                                 "n (vllm)": {"starts": 2, "points": ["p3"]}}
    assert len(merged["runs"]) == 2 and merged["created"] == "2026-01-01T00:00:00"
    assert {r["id"]: r["state"] for r in merge([main, shard, later])["points"]}["2"] == "done"
    dropped = {**main, "claimed": "2026-01-03T00:00:00", "points": [record("1", "done", "2026-01-01T01:00:00")]}
    assert [r["id"] for r in merge([dropped, shard])["points"]] == ["1", "2"]  # 3 never ran and left the sweep


def test_read_manifest_reads_the_shard_files_with_sweep_json(tmp_path):
    (tmp_path / "shards").mkdir()
    for i, state in ((1, "done"), (2, "failed")):
        (tmp_path / "shards" / f"{i}-of-2.json").write_text(json.dumps({
            "name": "s", "claimed": f"2026-01-0{i}", "points": [record(str(i), state, f"2026-01-0{i}T01")],
            "engines": {}, "runs": []}))
    assert {r["id"]: r["state"] for r in read_manifest(tmp_path)["points"]} == {"1": "done", "2": "failed"}
    (tmp_path / "shards" / "2-of-2.json").write_text("{ half a file")
    with pytest.raises(Exception, match="2-of-2.json: damaged sweep manifest"):
        read_manifest(tmp_path)
