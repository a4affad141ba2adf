#!/usr/bin/env bash
# CI: a real Docker daemon plus the local images the docker tests use, with no registry:
# local/busybox:latest and local/debian-python:bookworm (built by ../shared/scripts/
# docker-bootstrap.sh from the host's busybox and the apt mirror). Idempotent. Fails loudly when
# the daemon cannot start: the docker tests must never be skipped silently.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo ".ci/docker.sh: FAILED: $*" >&2; exit 1; }

bootstrap=../shared/scripts/docker-bootstrap.sh
[ -f "$bootstrap" ] || fail "$bootstrap not found (shared/ must sit beside the clone)"

# The bootstrap greps /etc/apt/sources.list for the Debian mirror; where only deb822 sources
# exist that file is missing, grep exits 2 and `pipefail` stops the bootstrap. An empty file is
# valid for apt.
[ -e /etc/apt/sources.list ] || : >/etc/apt/sources.list

PYTHON_IMAGE=1 bash "$bootstrap" || fail "docker-bootstrap.sh exited $?"
timeout 10 docker info >/dev/null 2>&1 \
  || fail "the Docker daemon is not reachable (log: ${DOCKERD_LOG:-/tmp/dockerd.log})"
for image in local/busybox:latest local/debian-python:bookworm; do
  docker image inspect "$image" >/dev/null 2>&1 || fail "image $image was not built"
done
echo ".ci/docker.sh: daemon and images ready"
