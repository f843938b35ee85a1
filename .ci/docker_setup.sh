#!/usr/bin/env bash
# Idempotent set-up for the sandbox tests (monkeybarrel.sandbox), run by .ci/run before pytest:
#   1. bubblewrap (the local backend's namespaces + read-only root) and docker.io, if missing;
#   2. a Docker engine, if none answers: dockerd with no bridge and no iptables (containers only ever
#      use network_mode="none"); its pid goes to $MONKEYBARREL_DOCKERD_PIDFILE so the caller can stop it
#      (an engine that was already running is left alone and the pid file stays empty);
#   3. the local sandbox image (no registry: debootstrap a minimal Debian with python3, `docker import`).
# Needs root. Environment: MONKEYBARREL_DOCKERD_PIDFILE (default /run/monkeybarrel-dockerd.pid),
# MONKEYBARREL_SANDBOX_IMAGE (default monkeybarrel/sandbox-python:bookworm), MONKEYBARREL_DEBIAN_MIRROR
# (default: the Debian archive this system's apt sources use).
set -euo pipefail
. "$(dirname "$0")/debian_mirror.sh"

pidfile=${MONKEYBARREL_DOCKERD_PIDFILE:-/run/monkeybarrel-dockerd.pid}
image=${MONKEYBARREL_SANDBOX_IMAGE:-monkeybarrel/sandbox-python:bookworm}

if [ "$(id -u)" != 0 ]; then
  echo "docker_setup.sh: needs root (installs packages, starts dockerd)" >&2
  exit 1
fi

apt_updated=""
if ! command -v bwrap >/dev/null; then  # the local backend's strongest layer; installed on its own
  apt-get update -q && apt_updated=1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap || echo "docker_setup.sh: bubblewrap not installed" >&2
fi

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  echo "docker_setup.sh: installing ${missing[*]}"
  [ -n "$apt_updated" ] || apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

if ! docker info >/dev/null 2>&1; then
  echo "docker_setup.sh: starting dockerd (log: /var/log/monkeybarrel-dockerd.log)"
  dockerd --storage-driver=overlay2 --bridge=none --iptables=false \
    >/var/log/monkeybarrel-dockerd.log 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { echo "docker_setup.sh: dockerd did not come up" >&2; exit 1; }
fi

if ! docker image inspect "$image" >/dev/null 2>&1; then
  echo "docker_setup.sh: building $image with debootstrap (a few minutes)"
  root=$(mktemp -d /var/tmp/monkeybarrel-rootfs.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase --include=python3 bookworm "$root" $(debian_mirror bookworm) >/dev/null
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc "$root"/usr/share/man
  tar -C "$root" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8' -c 'WORKDIR /' - "$image" >/dev/null
fi
echo "docker_setup.sh: docker ready, image $image present"
