"""Run a sweep: validate every point, then run the unfinished ones grouped by engine, sharing engines.

Order of work (``run_sweep``):

1. every Ray cluster a point samples on is asked whether it answers and lets this driver in
   (``cluster.check_cluster``: one line, exit 2, when it does not); under ``--shard I/N`` only this
   shard's points run (``shards.split``: by engine group);
2. the sweep directory is locked (one driver at a time; one per shard) and claimed
   (``manifest.claim``: another sweep's directory is refused);
3. every point that still has work is validated before anything is sampled: its data, plug-ins,
   models and servers (``stages.preflight``) and its stored results (a stored point whose config
   changed in a result-changing key); all problems are reported together (``ConfigError``, exit 2),
   those of every shard's points (a shard refuses a sweep file another shard would die on);
   ``dry_run`` stops here and returns the plan (``SweepResult.plan``);
4. points are grouped by the engines they need (backend, model and engine options, as
   ``Sampler.key_for`` says). With one device (or under ``--ray-address``) each group runs in this
   process inside one ``shared_engines()`` block, so a model's engine starts once for all its
   points, and blocks are closed between groups (one model's GPU memory at a time). With several
   devices (``--gpus``) groups run side by side in lanes, worker processes on their own GPUs
   (``lanes.py``, placed by ``placement.py``);
5. each point runs ``run_experiment`` (resumable to the sample), retried with exponential waits
   when it fails (``points.run_point``); a point whose every try fails is recorded ``failed`` and
   the sweep goes on;
6. Ctrl-C stops at once: finished candidates are in the stores, the point goes back to
   ``pending``, the engines close, ``KeyboardInterrupt`` propagates (the CLI exits 130).

The manifest (``sweep.json``, or ``shards/I-of-N.json``) is rewritten at every state change, with
the engines started per model and, at the end, each point's GPU-seconds with engine starts shared
(``accounting.py``).
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...core.config import ConfigError, ExperimentConfig, GeneratorSpec, fingerprint
from ...core.files import TaskDataError
from ...core.plugins import build_plugin
from ...core.registry import UnknownNameError
from ...samplers.base import SAMPLERS
from ..runner import stored_conflicts
from ..stages.preflight import preflight
from ..store.config_guard import ConfigConflictError
from ..store.lock import RunLock
from ..store.manifest import now
from .accounting import gpu_seconds
from .cluster import check_cluster, cluster_addresses
from .lanes import LaneRunner
from .manifest import (SHARDS, claim, is_done, manifest_file, point_record, stamp, write_manifest,
                       write_sweep_file)
from .placement import Devices, engine_gpus, find_devices, group_need
from .points import ManifestJournal, Planned, one_line, run_group  # noqa: F401  (one_line: public here too)
from .shards import ShardLock, split
from .spec import Point, RetrySpec, Sweep, describe, invalid_points


@dataclass
class SweepResult:
    directory: Path
    states: Counter
    engine_starts: dict[str, int]
    plan: list[dict[str, Any]] = field(default_factory=list)
    """With ``dry_run``: this run's points in run order, ``{"name", "id", "state", "engines"}`` (and
    ``"needs"``, the devices of its lane, when engine groups run in lanes)."""
    devices: str | None = None
    """The devices lanes are placed on (``GPUs 0,1``), when engine groups run in lanes."""
    shard: tuple[int, int] | None = None
    """``(I, N)`` under ``--shard I/N``."""


def on_ray(config: ExperimentConfig, address: str, options: dict[str, Any] | None = None) -> ExperimentConfig:
    """``config`` with each generator run by the ``ray`` backend on the cluster at ``address``.

    A generator's backend and options become the ray backend's ``backend`` and ``backend_options``
    (``options`` adds ray backend options such as ``num_gpus_per_worker``); a ``ray`` generator
    keeps its own options and gets ``address`` unless it names one.
    """
    data = config.to_dict()
    for generator in data["generators"]:
        own = generator["options"]
        if generator["backend"] == "ray":
            generator["options"] = {**(options or {}), **own, "address": own.get("address") or address}
        else:
            generator["options"] = {**(options or {}), "backend": generator["backend"], "backend_options": own,
                                    "address": address}
            generator["backend"] = "ray"
    return ExperimentConfig.from_dict(data, source=f"{config.name} on Ray")


def plan(sweep: Sweep, ray_address: str | None = None) -> list[Planned]:
    """Each point's run config and engine keys, in run order: grouped by engines, groups in point order.

    Raises:
        ConfigError: naming every point whose samplers cannot be built (unknown backend, bad option).
    """
    planned, errors = [], []
    for point in sweep.points:
        try:
            config = on_ray(point.config, ray_address, sweep.spec.ray) if ray_address else point.config
            item = Planned(point, config)
            shares = []
            for index, spec in enumerate(config.generators):
                sampler = build_plugin(SAMPLERS, spec.backend, f"generators[{index}]", spec=spec, **spec.options)
                try:
                    key = str(sampler.engine_key())
                    item.engines[key] = engine_label(spec)
                    item.needs[key] = engine_gpus(spec)
                    item.generator_engines[spec.id] = key  # a label once labels are told apart
                    shares.append(key)
                finally:
                    sampler.close()
        except ConfigError as exc:
            errors.append(_point_error(point, exc))
            continue
        item.group = tuple(sorted(set(shares)))
        planned.append(item)
    if errors:
        raise ConfigError(invalid_points(str(sweep.source or sweep.name), errors, len(sweep.points)))
    _disambiguate(planned)
    order = {group: i for i, group in reversed(list(enumerate(p.group for p in planned)))}
    return sorted(planned, key=lambda p: (order[p.group], p.point.index))


def engine_label(spec: GeneratorSpec) -> str:
    """``model (backend)``, ``model (ray: vllm)``: how status and the report name an engine."""
    inner = spec.options.get("backend", "embedded") if spec.backend == "ray" else None
    model = Path(spec.model).name if spec.model.startswith(("/", ".", "~")) else spec.model
    return f"{model} ({spec.backend}{': ' + inner if inner else ''})"


def _disambiguate(planned: list[Planned]) -> None:
    """Distinct labels for distinct engines of one model (other engine options): ``model (backend) #1a2b``."""
    keys_of: dict[str, set[str]] = {}
    for item in planned:
        for key, label in item.engines.items():
            keys_of.setdefault(label, set()).add(key)
    for item in planned:
        item.engines = {key: label if len(keys_of[label]) == 1 else f"{label} #{fingerprint(key)[:4]}"
                        for key, label in item.engines.items()}
        item.generator_engines = {gid: item.engines[key] for gid, key in item.generator_engines.items()}


def validate(planned: list[Planned], directory: Path, where: str) -> dict[str, int]:
    """Preflight every point (data, plug-ins, models, servers) and its stored results; returns the
    expected candidates per point id.

    Raises:
        ConfigError: one message naming every point that fails, with the key (exit 2).
    """
    errors, expected, reached = [], {}, set()
    for item in planned:
        point, name = item.point, item.point.name
        servers = fingerprint([g.options for g in item.config.generators] + [v.options for v in item.config.verifiers])
        try:
            _, problems = preflight(item.config, reach_servers=servers not in reached)
            reached.add(servers)
            conflicts = stored_conflicts(item.config, directory / name)
            if conflicts:
                raise ConfigConflictError(f"{directory / name} holds results of another config: "
                                          + "; ".join(conflicts[:4]) + " (a point resumes with the --ray-address it started with)")
        except (ConfigError, ConfigConflictError, TaskDataError, UnknownNameError, OSError) as exc:
            errors.append(_point_error(point, exc))
            continue
        expected[point.id] = len(problems) * sum(g.num_samples for g in item.config.generators)
    if errors:
        raise ConfigError(invalid_points(where, errors, len(planned)))
    return expected


def _point_error(point: Point, exc: BaseException) -> str:
    return f"point {point.name} ({describe(point.overrides)}): {exc}"


@dataclass
class Setting:
    """How a run is spread: the devices it places engines on, and the shard of the sweep it runs."""

    devices: Devices
    shard: tuple[int, int] | None = None

    @property
    def lanes(self) -> bool:
        """Engine groups run side by side in worker processes (several devices)."""
        return len(self.devices.ids) > 1


def run_sweep(sweep: Sweep, directory: str | Path, *, ray_address: str | None = None,
              retry: RetrySpec | None = None, show_progress: bool = True, dry_run: bool = False,
              echo: Callable[[str], None] = print, gpus: str | None = None,
              shard: tuple[int, int] | None = None) -> SweepResult:
    """Run (or resume) ``sweep`` into ``directory``; see the module docstring.

    Args:
        gpus: ``--gpus`` (``auto``: every visible GPU; a count; ids ``0,1``; N CPU slots where no GPU is
            visible). Ignored under ``ray_address`` (Ray places the engines).
        shard: ``(I, N)``: run only shard I of N (``--shard``), writing ``DIR/shards/I-of-N.json``.

    Returns:
        The points' states after the run (this shard's, under ``shard``) and the engine starts of this run.

    Raises:
        ConfigError: a point is invalid, a cluster does not answer (nothing ran). ForeignSweepError: the
        directory holds another sweep. StoreLockedError: another driver runs this directory (or shard).
        KeyboardInterrupt: Ctrl-C (everything finished is stored; the next run resumes).
    """
    directory = Path(directory)
    retry = retry or sweep.spec.retry
    where = str(sweep.source or sweep.name)
    if ray_address and gpus not in (None, "auto"):
        raise ConfigError(f"--gpus {gpus} places engines on this machine's GPUs; with --ray-address Ray places "
                          "them (the ray backend's num_workers, num_gpus_per_worker)")
    planned = plan(sweep, ray_address)
    for address in cluster_addresses(item.config for item in planned):
        echo(check_cluster(address))
    setting = Setting(Devices(("0",), gpu=False) if ray_address else find_devices(gpus), shard)
    mine = split(planned, shard[1])[shard[0] - 1] if shard else planned
    _check_needs(planned, setting, where)  # every shard's points: all invalid ones named at once
    file = manifest_file(shard)
    created = not directory.exists()
    with ShardLock(directory, shard) if shard else RunLock(directory, "sweep"):
        try:
            manifest = claim(directory, sweep, file)
            records = {item.point.id: point_record(manifest, item.point.id) for item in mine}
            unfinished = [item for item in planned if not is_done(point_record(manifest, item.point.id), item.point)]
            expected = validate(unfinished, directory, where)  # every shard's points: all invalid ones at once
            todo = [item for item in mine if item.point.id in expected]
        except Exception:
            if created:
                _remove_empty(directory)
            raise
        if dry_run:
            if created:
                _remove_empty(directory)
            return SweepResult(directory, Counter(r["state"] for r in records.values()), {},
                               _plan_rows(mine, records, setting),
                               setting.devices.describe() if setting.lanes else None, shard)
        for item in todo:
            record = records[item.point.id]
            record.update(expected_candidates=expected[item.point.id], engines=sorted(set(item.engines.values())),
                          generator_engines=item.generator_engines, updated=stamp())
            if shard:
                record["shard"] = f"{shard[0]}/{shard[1]}"
            if record["state"] == "done":  # done with another config: runs again
                record["state"] = "pending"
        if shard:
            manifest["shard"] = {"index": shard[0], "count": shard[1], "points": [i.point.name for i in mine]}
        run = {"started": now(), "pid": os.getpid(), "host": socket.gethostname(), "ray_address": ray_address,
               "points": len(todo), "engine_starts": {}, "shard": f"{shard[0]}/{shard[1]}" if shard else None,
               "devices": setting.devices.describe() if setting.lanes else None}
        manifest["runs"].append(run)
        write_manifest(directory, manifest, file)  # before sweep.yaml: a shard starting beside this one sees a sweep
        write_sweep_file(directory, sweep)
        part = f" (shard {shard[0]}/{shard[1]}: {len(mine)} of {len(planned)} points)" if shard else ""
        echo(f"sweep {sweep.name}{part}: {len(mine)} points, {len(mine) - len(todo)} done, {len(todo)} to run -> "
             f"{directory}" + (f" on {setting.devices.describe()}" if setting.lanes and todo else ""))
        journal = ManifestJournal(directory, manifest, run, file, echo)
        try:
            if setting.lanes:
                LaneRunner(todo, records, directory, journal, setting.devices, retry, _label).run()
            else:
                _run_groups(todo, records, directory, journal, retry, show_progress)
            run["outcome"] = "completed"
        except KeyboardInterrupt:
            run["outcome"] = "interrupted"
            raise
        finally:
            run["finished"] = now()
            manifest["gpu_seconds"] = gpu_seconds(directory, manifest["points"])
            write_manifest(directory, manifest, file)
        states = Counter(point_record(manifest, item.point.id)["state"] for item in mine)
        return SweepResult(directory, states, dict(run["engine_starts"]))


def _check_needs(planned: list[Planned], setting: Setting, where: str) -> None:
    """Every point's engines fit the devices (a vLLM engine of tensor_parallel_size 4 needs 4 GPUs)."""
    if not setting.lanes:
        return
    count = len(setting.devices.ids)
    errors = [_point_error(item.point, ConfigError(f"its engines need {group_need(item.needs, count)} GPUs "
                                                   f"(tensor_parallel_size x pipeline_parallel_size); "
                                                   f"--gpus gives {count}"))
              for item in planned if group_need(item.needs, count) > count]
    if errors:
        raise ConfigError(invalid_points(where, errors, len(planned)))


def _label(item: Planned) -> str:
    return f"{item.point.name}  ({', '.join(sorted(set(item.engines.values())))})"


def _run_groups(todo: list[Planned], records: dict[str, dict[str, Any]], directory: Path, journal: ManifestJournal,
                retry: RetrySpec, show_progress: bool) -> None:
    """One group after another in this process, each in one ``shared_engines()`` block."""
    groups: dict[tuple[str, ...], list[Planned]] = {}
    for item in todo:
        groups.setdefault(item.group, []).append(item)
    position = 0
    for items in groups.values():
        queue = iter(items)

        def next_item() -> tuple[Planned, dict[str, Any]] | None:
            item = next(queue, None)
            return None if item is None else (item, records[item.point.id])

        def announce(item: Planned) -> str:
            nonlocal position
            position += 1
            return f"[{position}/{len(todo)}] {_label(item)}"

        run_group(next_item, directory, journal, retry, show_progress, announce)


def _plan_rows(planned: list[Planned], records: dict[str, dict[str, Any]], setting: Setting) -> list[dict[str, Any]]:
    """The dry run's plan: each point in run order, ``{"name", "id", "state", "engines"}`` and, with lanes,
    ``"needs"`` (the devices its engine group holds)."""
    count = len(setting.devices.ids)
    return [{"name": records[item.point.id]["name"], "id": item.point.id,
             "state": "done" if is_done(records[item.point.id], item.point) else records[item.point.id]["state"],
             "engines": sorted(set(item.engines.values())),
             **({"needs": group_need(item.needs, count)} if setting.lanes else {})} for item in planned]


def _remove_empty(directory: Path) -> None:
    """Remove a directory this run created when it holds nothing but lock files (its own, a shard's)."""
    shards = directory / SHARDS
    if shards.is_dir() and all(p.name.startswith(".lock") for p in shards.iterdir()):
        for p in shards.iterdir():
            p.unlink()
        shards.rmdir()
    if directory.is_dir() and all(p.name == ".lock" for p in directory.iterdir()):
        for p in directory.iterdir():
            p.unlink()
        directory.rmdir()
