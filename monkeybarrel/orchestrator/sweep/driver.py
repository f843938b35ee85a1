"""Run a sweep: validate every point, then run the unfinished ones grouped by engine, sharing engines.

Order of work (``run_sweep``):

1. the sweep directory is locked (one driver at a time) and claimed (``manifest.claim``: another
   sweep's directory is refused);
2. every point that still has work is validated before anything is sampled: its data, plug-ins,
   models and servers (``stages.preflight``) and its stored results (a stored point whose config
   changed in a result-changing key); all problems are reported together (``ConfigError``, exit 2);
3. points are grouped by the engines they need (backend, model and engine options, as
   ``Sampler.key_for`` says) and each group runs inside one ``shared_engines()`` block, so a model's
   engine starts once for all its points; blocks are closed between groups (one model's GPU memory
   at a time);
4. each point runs ``run_experiment`` (resumable to the sample), retried with exponential waits
   (tenacity) when it fails; the engines of a failed try are closed so the next try starts fresh;
   a point whose every try fails is recorded ``failed`` with its error and the sweep goes on;
5. Ctrl-C stops at once: finished candidates are in the stores, the point goes back to
   ``pending``, the engines close, ``KeyboardInterrupt`` propagates (the CLI exits 130).

``sweep.json`` is rewritten at every state change, with the engines started per model.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from ...core.config import ConfigError, ExperimentConfig, GeneratorSpec, fingerprint
from ...core.files import TaskDataError
from ...core.plugins import build_plugin
from ...core.registry import UnknownNameError
from ...samplers.base import SAMPLERS
from ...samplers.engine_pool import EnginePool, shared_engines
from ..runner import run_experiment, stored_conflicts
from ..stages.preflight import preflight
from ..store.config_guard import ConfigConflictError
from ..store.lock import RunLock, StoreLockedError
from ..store.manifest import now
from .manifest import claim, config_hash, count_starts, is_done, point_record, write_manifest, write_sweep_file
from .spec import Point, RetrySpec, Sweep, describe, invalid_points

FINAL_ERRORS = (ConfigError, ConfigConflictError, TaskDataError, UnknownNameError, StoreLockedError)
"""Failures a retry cannot fix: bad config or data, a store of another config, a store another process writes."""


@dataclass
class Planned:
    """A point with the config it runs with and the engines it needs."""

    point: Point
    config: ExperimentConfig
    """``point.config``, its generators wrapped into ``backend: ray`` under ``--ray-address``."""
    engines: dict[str, str] = field(default_factory=dict)
    """Engine key (as the engine pool counts it) -> readable label (``model (backend)``)."""
    group: tuple[str, ...] = ()
    """Points with equal groups run in one ``shared_engines()`` block."""


@dataclass
class SweepResult:
    directory: Path
    states: Counter
    engine_starts: dict[str, int]
    plan: list[dict[str, Any]] = field(default_factory=list)
    """With ``dry_run``: each point in run order, ``{"name", "id", "state", "engines"}``."""


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
                    key = sampler.engine_key()
                    item.engines[str(key)] = engine_label(spec)
                    shares.append(str(key))
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


class _Engines:
    """The open ``shared_engines()`` block of a group; closed and reopened after a failed try."""

    def __init__(self, on_close: Callable[[EnginePool], None], on_start: Callable[[str], None]) -> None:
        self._stack: ExitStack | None = None
        self._on_close, self._on_start = on_close, on_start
        self.pool: EnginePool | None = None

    def open(self) -> None:
        if self.pool is None:
            self._stack = ExitStack()
            self.pool = self._stack.enter_context(shared_engines(self._on_start))

    def close(self) -> None:
        if self.pool is not None:
            pool, stack, self.pool, self._stack = self.pool, self._stack, None, None
            try:
                stack.close()
            finally:
                self._on_close(pool)


def run_sweep(sweep: Sweep, directory: str | Path, *, ray_address: str | None = None,
              retry: RetrySpec | None = None, show_progress: bool = True, dry_run: bool = False,
              echo: Callable[[str], None] = print) -> SweepResult:
    """Run (or resume) ``sweep`` into ``directory``; see the module docstring.

    Returns:
        The points' states after the run and the engine starts of this run (label -> count).

    Raises:
        ConfigError: a point is invalid (nothing ran). ForeignSweepError: the directory holds another
        sweep. StoreLockedError: another driver runs this directory. KeyboardInterrupt: Ctrl-C
        (everything finished is stored; the next run resumes).
    """
    directory = Path(directory)
    retry = retry or sweep.spec.retry
    where = str(sweep.source or sweep.name)
    planned = plan(sweep, ray_address)
    created = not directory.exists()
    with RunLock(directory, "sweep"):
        try:
            manifest = claim(directory, sweep)
            records = {item.point.id: point_record(manifest, item.point.id) for item in planned}
            todo = [item for item in planned if not is_done(records[item.point.id], item.point)]
            expected = validate(todo, directory, where)
        except Exception:
            if created:
                _remove_empty(directory)
            raise
        if dry_run:
            if created:
                _remove_empty(directory)
            return SweepResult(directory, Counter(r["state"] for r in records.values()), {}, _plan_rows(planned, records))
        for item in todo:
            records[item.point.id]["expected_candidates"] = expected[item.point.id]
            records[item.point.id]["engines"] = sorted(set(item.engines.values()))
            if records[item.point.id]["state"] == "done":  # done with another config: runs again
                records[item.point.id]["state"] = "pending"
        write_sweep_file(directory, sweep)
        run = {"started": now(), "pid": os.getpid(), "host": socket.gethostname(), "ray_address": ray_address,
               "points": len(todo), "engine_starts": {}}
        manifest["runs"].append(run)
        write_manifest(directory, manifest)
        echo(f"sweep {sweep.name}: {len(planned)} points, {len(planned) - len(todo)} done, {len(todo)} to run "
             f"-> {directory}")
        try:
            _run_groups(todo, directory, manifest, run, retry, show_progress, echo)
            run["outcome"] = "completed"
        except KeyboardInterrupt:
            run["outcome"] = "interrupted"
            raise
        finally:
            run["finished"] = now()
            write_manifest(directory, manifest)
        states = Counter(point_record(manifest, item.point.id)["state"] for item in planned)
        return SweepResult(directory, states, dict(run["engine_starts"]))


def _run_groups(todo: list[Planned], directory: Path, manifest: dict[str, Any], run: dict[str, Any],
                retry: RetrySpec, show_progress: bool, echo: Callable[[str], None]) -> None:
    groups: dict[tuple[str, ...], list[Planned]] = {}
    for item in todo:
        groups.setdefault(item.group, []).append(item)
    position = 0
    for items in groups.values():
        labels = {key: label for item in items for key, label in item.engines.items()}
        served: dict[str, list[str]] = {}

        def started(key: str) -> None:  # recorded at once: a run killed with SIGKILL keeps its count
            count_starts(manifest, run, {labels.get(key, "unshared engine"): 1}, served)
            write_manifest(directory, manifest)

        def closed(pool: EnginePool) -> None:  # the points served since the engines started
            count_starts(manifest, run, {labels.get(key, "unshared engine"): 0 for key in pool.starts}, served)
            write_manifest(directory, manifest)

        engines = _Engines(closed, started)
        try:
            for item in items:
                position += 1
                for label in item.engines.values():
                    served.setdefault(label, []).append(item.point.name)
                echo(f"[{position}/{len(todo)}] {item.point.name}  ({', '.join(sorted(set(item.engines.values())))})")
                _run_point(item, directory, manifest, engines, retry, show_progress, echo)
        finally:
            engines.close()


def _run_point(item: Planned, directory: Path, manifest: dict[str, Any], engines: _Engines, retry: RetrySpec,
               show_progress: bool, echo: Callable[[str], None]) -> None:
    record = point_record(manifest, item.point.id)
    record.update(state="running", started=now(), finished=None, host=socket.gethostname(), pid=os.getpid(), tries=0)
    write_manifest(directory, manifest)

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        record.update(error=one_line(error), traceback=_traceback(error))
        engines.close()  # the next try starts its engines afresh
        write_manifest(directory, manifest)
        echo(f"  try {state.attempt_number} of {retry.attempts} failed: {one_line(error)}; "
             f"trying again in {state.upcoming_sleep:.0f} s")

    retrying = Retrying(stop=stop_after_attempt(retry.attempts),
                        wait=wait_exponential(multiplier=retry.wait_s, max=retry.max_wait_s),
                        retry=retry_if_exception(lambda e: isinstance(e, Exception) and not isinstance(e, FINAL_ERRORS)),
                        before_sleep=before_sleep, reraise=True)
    try:
        for attempt in retrying:
            with attempt:
                record["tries"] = attempt.retry_state.attempt_number
                record["attempts"] = record.get("attempts", 0) + 1
                engines.open()
                run_experiment(item.config, directory / record["name"], show_progress=show_progress)
    except KeyboardInterrupt:
        record.update(state="pending", finished=now())
        raise
    except Exception as exc:
        record.update(state="failed", finished=now(), error=one_line(exc), traceback=_traceback(exc))
        engines.close()
        echo(f"  failed after {record['tries']} tr{'y' if record['tries'] == 1 else 'ies'}: {one_line(exc)}")
    else:
        record.update(state="done", finished=now(), config_hash=config_hash(item.point))
        if record["tries"] == 1:
            record.update(error=None, traceback=None)
    finally:
        write_manifest(directory, manifest)


def one_line(exc: BaseException | None) -> str | None:
    """``Type: the whole message on one line`` (a multi-line message's lines joined: the cause is kept)."""
    if exc is None:
        return None
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _traceback(exc: BaseException | None) -> str | None:
    return None if exc is None else "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]


def _plan_rows(planned: list[Planned], records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": records[item.point.id]["name"], "id": item.point.id,
             "state": "done" if is_done(records[item.point.id], item.point) else records[item.point.id]["state"],
             "engines": sorted(set(item.engines.values()))} for item in planned]


def _remove_empty(directory: Path) -> None:
    """Remove a directory this run created when it holds nothing but the lock file."""
    if directory.is_dir() and all(p.name == ".lock" for p in directory.iterdir()):
        for p in directory.iterdir():
            p.unlink()
        directory.rmdir()
