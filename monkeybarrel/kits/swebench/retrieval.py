"""File context for one-shot (Agentless-style) patch generation: BM25 over the repository's files.

The repository's Python files at ``base_commit`` come from a local git checkout
(``repos_dir/<repo>``, for real SWE-bench: clone the repos there once) or, for locally built task
sets, from the instance's docker image (``git archive`` in a network-less container). Files are
ranked against the issue text with Okapi BM25 (``rank-bm25``); the top files go into the prompt.
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import tarfile
from pathlib import Path

from ...sandbox.docker_backend import DockerSession
from .schema import SWEInstance

_WORD = re.compile(r"[A-Za-z][a-z0-9]*|[A-Z]+(?![a-z])|\d+")


def tokenize(text: str) -> list[str]:
    """Lower-case identifier pieces: ``camelCase_snake`` -> ``camel case snake`` (BM25 terms)."""
    return [w.lower() for w in _WORD.findall(text)]


def _untar(blob: bytes) -> dict[str, str]:
    files = {}
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name] = tar.extractfile(member).read().decode("utf-8", "replace")
    return files


def repo_files(instance: SWEInstance, repos_dir: str | Path | None = None, client=None,
               pattern: str = "*.py") -> dict[str, str]:
    """``{path: text}`` of the files matching ``pattern`` at the instance's base commit.

    Args:
        instance: the task instance.
        repos_dir: folder of git checkouts named ``owner__name`` or ``name``; when None, the
            instance's ``image_name``/``repo_dir`` are read through a container.
        client: docker client (default ``docker.from_env()``).
    """
    archive = ["git", "archive", "--format=tar", instance.base_commit, "--", pattern]
    if repos_dir is not None:
        owner_name = instance.repo.replace("/", "__")
        for name in (owner_name, instance.repo.split("/")[-1]):
            checkout = Path(repos_dir) / name
            if checkout.is_dir():
                blob = subprocess.run(archive, cwd=checkout, capture_output=True, check=True).stdout
                return _untar(blob)
        raise FileNotFoundError(f"{repos_dir}: no checkout {owner_name!r} for {instance.instance_id}")
    if not instance.image_name or not instance.repo_dir:
        raise ValueError(f"{instance.instance_id}: no repos_dir given and fields image_name/repo_dir are empty")
    with DockerSession(instance.image_name, instance.repo_dir, client=client) as session:
        code, output = session.exec(" ".join(shlex.quote(a) for a in archive), 60)
    if code != 0:
        raise RuntimeError(f"git archive failed in {instance.image_name}: {output[-300:]!r}")
    return _untar(output)


def rank_files(query: str, files: dict[str, str], top_k: int = 3, exclude_tests: bool = True) -> list[str]:
    """The ``top_k`` paths whose path+content best match ``query`` under BM25 (ties: path order)."""
    try:
        from rank_bm25 import BM25Okapi
    except ImportError as exc:  # pragma: no cover - environment dependent
        raise ImportError("retrieval needs `pip install monkeybarrel[swebench]` (rank-bm25)") from exc
    paths = sorted(p for p in files if not (exclude_tests and _is_test(p)))
    if not paths:
        return []
    bm25 = BM25Okapi([tokenize(p) * 3 + tokenize(files[p]) for p in paths])
    scores = bm25.get_scores(tokenize(query))
    order = sorted(range(len(paths)), key=lambda i: (-scores[i], paths[i]))
    return [paths[i] for i in order[:top_k]]


def _is_test(path: str) -> bool:
    parts = path.split("/")
    return any(p in ("tests", "test", "testing") for p in parts[:-1]) or parts[-1].startswith("test_") \
        or parts[-1].endswith("_test.py") or parts[-1] == "conftest.py"


def context_block(files: dict[str, str], paths: list[str], max_chars: int = 12_000) -> str:
    """The chosen files as fenced blocks, each cut to ``max_chars`` characters."""
    blocks = []
    for path in paths:
        text = files[path]
        if len(text) > max_chars:
            text = text[:max_chars] + "\n# ... (file truncated)\n"
        blocks.append(f"### {path}\n```python\n{text}```")
    return "\n\n".join(blocks)
