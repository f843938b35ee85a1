"""Unified diffs: pull a patch out of model text, normalise it, check its syntax.

Normalisation makes equal edits compare equal (votes, dedup, caching): CRLF -> LF, prose and code
fences around the diff removed, ``index``/timestamp noise dropped, hunk headers recounted from
the hunk bodies (small models miscount them), exactly one trailing newline. Whether the patch
applies to the repository is checked later with ``git apply --check`` inside the container.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

_FENCE = re.compile(r"```(?:diff|patch)?[ \t]*\n(.*?)```", re.S)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


class MalformedPatch(ValueError):
    """The text holds no usable unified diff; the message says why."""


@dataclass(frozen=True)
class NormalizedPatch:
    """A syntactically valid unified diff.

    Attributes:
        text: the normalised diff (ends with one newline).
        files: paths it modifies (``b/`` side; the ``a/`` side for deletions), in order.
        added_files: paths it creates.
    """

    text: str
    files: tuple[str, ...]
    added_files: tuple[str, ...]


def extract_diff(text: str | None) -> str:
    """The diff inside model output: the first fenced diff block, else from the first ``---``/``diff --git``."""
    if not text:
        raise MalformedPatch("empty output")
    text = text.replace("\r\n", "\n")
    for block in _FENCE.findall(text):
        if re.search(r"^(--- |diff --git )", block, re.M):
            return block
    match = re.search(r"^(diff --git |--- )", text, re.M)
    if not match:
        raise MalformedPatch("no diff header (`--- a/...` or `diff --git`) found")
    return text[match.start():]


def normalize_patch(text: str | None) -> NormalizedPatch:
    """Extract and normalise a diff; raises MalformedPatch naming the first problem.

    Hunk line counts are recomputed from the body, so a model's wrong ``@@`` numbers do not make
    an otherwise exact edit fail. The result is checked with ``unidiff``.
    """
    body = extract_diff(text)
    out: list[str] = []
    lines = body.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            break
        if line.startswith(("index ", "similarity index", "old mode", "new mode")):
            i += 1
            continue
        if line.startswith(("--- ", "+++ ")):
            out.append(line.split("\t")[0].rstrip())
            i += 1
            continue
        hunk = _HUNK.match(line)
        if hunk:
            old_start, new_start, tail = int(hunk.group(1)), int(hunk.group(3)), hunk.group(5)
            j, old_n, new_n, hunk_lines = i + 1, 0, 0, []
            while j < len(lines) and (lines[j][:1] in (" ", "+", "-", "\\") or lines[j] == ""):
                candidate = lines[j]
                if candidate.startswith(("--- ", "+++ ")) and j + 1 < len(lines) and lines[j + 1].startswith(("+++ ", "@@")):
                    break
                if candidate == "":
                    # a blank context line whose leading space was stripped; stop at trailing blanks
                    if all(not rest.strip() for rest in lines[j:]):
                        break
                    candidate = " "
                if candidate[0] == " ":
                    old_n, new_n = old_n + 1, new_n + 1
                elif candidate[0] == "-":
                    old_n += 1
                elif candidate[0] == "+":
                    new_n += 1
                hunk_lines.append(candidate)
                j += 1
            if old_n == 0 and new_n == 0:
                raise MalformedPatch(f"empty hunk at diff line {i + 1}")
            out.append(f"@@ -{old_start},{old_n} +{new_start},{new_n} @@{tail}")
            out.extend(hunk_lines)
            i = j
            continue
        if line.startswith(("diff --git ", "new file mode", "deleted file mode", "rename from", "rename to",
                            "Binary files")):
            out.append(line)
        i += 1
    normalized = "\n".join(out).rstrip("\n") + "\n"
    return _check(normalized)


def _check(text: str) -> NormalizedPatch:
    try:
        from unidiff import PatchSet
        from unidiff.errors import UnidiffParseError
    except ImportError as exc:  # pragma: no cover - environment dependent
        raise ImportError("patch parsing needs `pip install monkeybarrel[swebench]` (unidiff)") from exc
    try:
        patch = PatchSet(text)
    except UnidiffParseError as exc:
        raise MalformedPatch(f"not a unified diff: {exc}") from None
    if len(patch) == 0:
        raise MalformedPatch("no file changes in the diff")
    files, added = [], []
    for item in patch:
        if not item.is_added_file and not item.is_removed_file and len(item) == 0:
            raise MalformedPatch(f"file {item.path!r} has no hunks")
        path = item.path
        for prefix in ("a/", "b/"):
            if path.startswith(prefix):
                path = path[2:]
        if path.startswith("/") or ".." in path.split("/"):
            raise MalformedPatch(f"path {path!r} leaves the repository")
        files.append(path)
        if item.is_added_file:
            added.append(path)
    return NormalizedPatch(text=text, files=tuple(files), added_files=tuple(added))


def is_trivial(patch: str | None) -> bool:
    """CodeMonkeys' filter: empty or one-line patches are not candidates for voting."""
    return patch is None or len(patch.strip().splitlines()) <= 1


def candidate_patches(texts: Sequence[str | None]) -> list[str | None]:
    """Each text's normalised patch, or None when it is malformed or trivial (such a candidate gets no vote)."""
    patches: list[str | None] = []
    for text in texts:
        try:
            patch = normalize_patch(text).text
        except MalformedPatch:
            patch = None
        patches.append(None if is_trivial(patch) else patch)
    return patches
