"""SWE-bench instances: the schema, hub and local loaders, errors naming file, line and field.

The hub datasets (``princeton-nlp/SWE-bench_Lite``, ``princeton-nlp/SWE-bench_Verified``) store
``FAIL_TO_PASS``/``PASS_TO_PASS`` as JSON-encoded strings; local files may hold either JSON strings
or plain lists. Locally built task sets add the environment fields ``image_name``, ``repo_dir`` and
``test_cmd`` (what the local evaluator needs); hub rows leave them empty (the official harness
builds its own images).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ...core.files import TaskDataError, read_records
from ...core.hub import load_hub_dataset
from ...core.records import Problem

HUB_DATASETS = {"lite": "princeton-nlp/SWE-bench_Lite", "verified": "princeton-nlp/SWE-bench_Verified"}
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "FAIL_TO_PASS", "PASS_TO_PASS")


class SWEInstance(BaseModel):
    """One SWE-bench task instance (the hub's columns plus optional local-environment fields)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str = ""
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...] = ()
    version: str = ""
    environment_setup_commit: str = ""
    created_at: str = ""
    hints_text: str = ""
    image_name: str | None = None
    """Local evaluator: docker image holding the repository (locally built task sets)."""
    repo_dir: str | None = None
    """Local evaluator: the git checkout's path inside the image."""
    test_cmd: str | None = None
    """Local evaluator: test command; test files are appended (pytest ``-rA`` output is parsed)."""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of test ids ({exc.msg})") from None
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError("expected a list of test ids (strings)")
        return tuple(value)

    @field_validator("instance_id", "repo", "base_commit")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @property
    def environment(self) -> tuple[str, str]:
        """(docker image, repository path in it) for running code: the local fields, else the official
        harness's instance image (``sweb.eval.x86_64.<id>``, built by ``swebench``) with the repo at /testbed."""
        if self.image_name:
            return self.image_name, self.repo_dir or "/testbed"
        return f"sweb.eval.x86_64.{self.instance_id.replace('__', '_1776_')}:latest", "/testbed"

    @property
    def test_files(self) -> list[str]:
        """Files holding the FAIL_TO_PASS/PASS_TO_PASS tests (pytest node ids ``file::name``), sorted."""
        return sorted({t.split("::", 1)[0] for t in (*self.FAIL_TO_PASS, *self.PASS_TO_PASS) if "::" in t})

    def to_record(self) -> dict[str, Any]:
        """Plain JSON-able record in the hub's layout (test lists JSON-encoded)."""
        record = self.model_dump()
        record["FAIL_TO_PASS"] = json.dumps(list(self.FAIL_TO_PASS))
        record["PASS_TO_PASS"] = json.dumps(list(self.PASS_TO_PASS))
        return {k: v for k, v in record.items() if v is not None}


def parse_instance(record: dict[str, Any], where: str) -> SWEInstance:
    """Validate one row; errors name ``where`` (``file:line``) and the field."""
    missing = [name for name in REQUIRED if record.get(name) is None]
    if missing:
        raise TaskDataError(f"{where}: missing field(s) {missing}; SWE-bench rows need {list(REQUIRED)}")
    try:
        return SWEInstance.model_validate(record)
    except ValidationError as exc:
        problems = "; ".join(f"field {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise TaskDataError(f"{where}: {problems}") from None


def load_instances(path: str | Path | None = None, *, dataset: str = "lite", split: str = "test",
                   instance_ids: Iterable[str] | None = None) -> list[SWEInstance]:
    """SWE-bench instances from a local JSONL/Parquet file or the hub.

    Args:
        path: local file in the hub schema (one instance per line / row); None = hub.
        dataset: ``lite``, ``verified`` or any hub id / local dataset directory ``datasets`` can load.
        split: hub split.
        instance_ids: keep only these (in file order); an unknown id is an error.

    Raises:
        TaskDataError: a bad row (file, 1-based line, field), duplicate ids, unknown requested ids.
    """
    if path is not None:
        rows = ((f"{path}:{line}", record) for line, record in read_records(path, required=REQUIRED))
        source = str(path)
    else:
        name = HUB_DATASETS.get(dataset, dataset)
        hub = load_hub_dataset(name, split=split, local_hint="set task.path (reproduce: --data) to a local JSONL or "
                               "Parquet file in the SWE-bench schema")
        rows = ((f"hub:{name}[{split}] row {i}", dict(r)) for i, r in enumerate(hub, 1))
        source = f"hub:{name}"
    instances, seen = [], {}
    for where, record in rows:
        instance = parse_instance(record, where)
        if instance.instance_id in seen:
            raise TaskDataError(f"{where}: field instance_id: duplicate {instance.instance_id!r} (first at {seen[instance.instance_id]})")
        seen[instance.instance_id] = where
        instances.append(instance)
    if instance_ids is not None:
        wanted = list(instance_ids)
        unknown = sorted(set(wanted) - set(seen))
        if unknown:
            raise TaskDataError(f"{source}: instance_ids not in the data: {unknown[:10]}")
        keep = set(wanted)
        instances = [i for i in instances if i.instance_id in keep]
    return instances


def write_instances(instances: Iterable[SWEInstance], path: str | Path) -> Path:
    """Write instances as JSONL in the hub layout (the inverse of ``load_instances``)."""
    path = Path(path)
    path.write_text("".join(json.dumps(i.to_record(), sort_keys=True) + "\n" for i in instances))
    return path


PUBLIC_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "hints_text", "version",
                 "created_at", "image_name", "repo_dir", "test_cmd")


def public_instance(problem: Problem) -> SWEInstance:
    """The label-free view of a problem's instance (no gold patch, no test lists)."""
    meta = problem.metadata
    return SWEInstance(**{k: meta[k] for k in PUBLIC_FIELDS if meta.get(k) is not None},
                       patch="", FAIL_TO_PASS=(), PASS_TO_PASS=())


def full_instance(problem: Problem) -> SWEInstance:
    """The whole instance (gold patch, FAIL_TO_PASS, PASS_TO_PASS) from the problem's reference."""
    if not problem.reference_answer:
        raise ValueError(f"{problem.problem_id}: no reference (the instance is only visible to label stages)")
    return SWEInstance.model_validate(json.loads(problem.reference_answer))
