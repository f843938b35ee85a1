#!/usr/bin/env bash
# Build the docker images of the local SWE task set (idempotent; assumes dockerd is running).
#   monkeybarrel/swe-base:bookworm      Debian bookworm minbase + python3, python3-venv, git (debootstrap)
#   monkeybarrel/swe-taskset-env:1      + pytest from a local wheelhouse + pristine project repos in /repos
#   monkeybarrel/swe-taskset:1          + one commit per task (base_commit ids verified against tasks.jsonl)
# Containers built from these never get a network; everything is downloaded here, on the host.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/.ci/debian_mirror.sh"
TASKSET="$ROOT/monkeybarrel/experiments/swe_taskset"
CACHE="${MONKEYBARREL_CACHE:-$HOME/.cache/monkeybarrel}/swe_taskset"
PY="${PYTHON:-$ROOT/.venv/bin/python}"; [ -x "$PY" ] || PY=python3
BASE=monkeybarrel/swe-base:bookworm
ENV_IMAGE=monkeybarrel/swe-taskset-env:1
IMAGE=$("$PY" -c "import json;print(json.load(open('$TASKSET/projects.json'))['image'])")
mkdir -p "$CACHE"
have() { docker image inspect "$1" >/dev/null 2>&1; }

if ! have "$BASE"; then
  command -v debootstrap >/dev/null || apt-get install -y debootstrap
  rootfs="$CACHE/rootfs"; rm -rf "$rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,git bookworm "$rootfs" $(debian_mirror bookworm)
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import - "$BASE"
  rm -rf "$rootfs"
fi

wheels="$CACHE/wheels"; mkdir -p "$wheels"
pytest_req=$("$PY" -c "import json;print(json.load(open('$TASKSET/projects.json'))['pytest'])")
"$PY" -m pip download -q --only-binary :all: --python-version 3.11 --platform manylinux2014_x86_64 -d "$wheels" "$pytest_req"
"$PY" -c "import json;[print(f\"{p['name']}=={p['version']}\") for p in json.load(open('$TASKSET/projects.json'))['projects']]" |
  while read -r req; do "$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d "$wheels" "$req"; done

ctx="$CACHE/context"; rm -rf "$ctx"; mkdir -p "$ctx"
cp -r "$wheels" "$ctx/wheels"; cp "$TASKSET/build_repos.py" "$TASKSET/projects.json" "$TASKSET/tasks.jsonl" "$ctx/"
if ! have "$ENV_IMAGE"; then
  cat > "$ctx/Dockerfile.env" <<DOCKER
FROM $BASE
COPY wheels /wheels
COPY build_repos.py projects.json /taskset/
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install -q --no-index --find-links /wheels "$pytest_req" \
 && python3 /taskset/build_repos.py --sdists /wheels --projects /taskset/projects.json --out /repos
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1
DOCKER
  docker build -q -f "$ctx/Dockerfile.env" -t "$ENV_IMAGE" "$ctx"
fi

tasks_sha=$(sha256sum "$TASKSET/tasks.jsonl" | cut -c1-16)
if [ "$(docker image inspect --format '{{index .Config.Labels "tasks_sha"}}' "$IMAGE" 2>/dev/null || true)" != "$tasks_sha" ]; then
  cat > "$ctx/Dockerfile.tasks" <<DOCKER
FROM $ENV_IMAGE
COPY tasks.jsonl /taskset/
RUN python3 /taskset/build_repos.py --projects /taskset/projects.json --out /repos --tasks /taskset/tasks.jsonl
LABEL tasks_sha=$tasks_sha
DOCKER
  docker build -q -f "$ctx/Dockerfile.tasks" -t "$IMAGE" "$ctx"
fi
echo "swe_setup: $IMAGE ready"
