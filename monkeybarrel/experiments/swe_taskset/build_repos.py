"""Build the task set's git repositories deterministically (stdlib only: runs inside the image too).

For each project of ``projects.json``: unpack its PyPI sdist into ``OUT/<name>``, commit it as
the pristine commit, and (with ``--tasks``) add one commit per task holding the task's bug (the
gold patch reversed) on top of the pristine commit. Author, committer and dates are fixed, so the
commit ids equal the ``base_commit`` values of ``tasks.jsonl`` wherever this runs; a mismatch is
an error.

    python3 build_repos.py --sdists WHEELHOUSE --out /repos [--tasks tasks.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GIT_ENV = {
    "GIT_AUTHOR_NAME": "monkeybarrel", "GIT_AUTHOR_EMAIL": "taskset@monkeybarrel.invalid",
    "GIT_COMMITTER_NAME": "monkeybarrel", "GIT_COMMITTER_EMAIL": "taskset@monkeybarrel.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent",
}


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    """Run git in ``repo`` with the fixed identity; returns stdout, raises with stderr on failure."""
    env = {**os.environ, **GIT_ENV}
    env.pop("GIT_DIR", None)
    proc = subprocess.run(["git", "-c", "core.autocrlf=false", "-c", "commit.gpgsign=false", "-c", "core.fileMode=true",
                           *args], cwd=repo, env=env, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout


def load_projects(path: Path = HERE / "projects.json") -> dict:
    return json.loads(path.read_text())


def sdist_path(sdists: Path, name: str, version: str) -> Path:
    for candidate in (sdists / f"{name}-{version}.tar.gz", sdists / f"{name.replace('-', '_')}-{version}.tar.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{sdists}: no sdist {name}-{version}.tar.gz (pip download --no-binary :all: {name}=={version})")


def build_pristine(sdist: Path, repo: Path) -> str:
    """Unpack ``sdist`` (top folder stripped) into a fresh repo at ``repo``; returns the pristine commit id."""
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts[1:]
            if not parts or not (member.isfile() or member.isdir()):
                continue
            target = repo.joinpath(*parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
            target.chmod(0o755 if member.mode & 0o100 else 0o644)
    git(repo, "init", "-q")
    git(repo, "add", "-A", "-f")
    git(repo, "commit", "-q", "--no-verify", "-m", f"{sdist.name}: pristine sdist")
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "tag", "pristine")
    return head


def commit_bug(repo: Path, pristine: str, gold_patch: str, instance_id: str) -> str:
    """Commit the task's buggy state (gold patch reversed) on top of ``pristine``; returns its id."""
    git(repo, "checkout", "-q", "-f", "--detach", pristine)
    git(repo, "apply", "-R", "-", stdin=gold_patch)
    git(repo, "commit", "-q", "--no-verify", "-a", "-m", f"{instance_id}: buggy state")
    sha = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-f", "--detach", pristine)
    return sha


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdists", type=Path, help="folder with the projects' sdists (needed without existing repos)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--projects", type=Path, default=HERE / "projects.json")
    parser.add_argument("--tasks", type=Path, help="tasks.jsonl: add (and verify) one bug commit per task")
    args = parser.parse_args(argv)
    projects = load_projects(args.projects)["projects"]
    pristine = {}
    for project in projects:
        repo = args.out / project["name"]
        if args.sdists is not None:
            pristine[project["name"]] = build_pristine(sdist_path(args.sdists, project["name"], project["version"]), repo)
        else:
            pristine[project["name"]] = git(repo, "rev-parse", "pristine").strip()
        print(f"{project['name']}: pristine {pristine[project['name']]}")
    if args.tasks is not None:
        for line_number, line in enumerate(args.tasks.read_text().splitlines(), 1):
            if not line.strip():
                continue
            task = json.loads(line)
            name = task["repo"].split("/")[-1]
            sha = commit_bug(args.out / name, pristine[name], task["patch"], task["instance_id"])
            if sha != task["base_commit"]:
                raise SystemExit(f"{args.tasks}:{line_number}: field base_commit: built {sha}, file says {task['base_commit']}")
        print(f"{args.tasks}: all base commits built and verified")


if __name__ == "__main__":
    main()
