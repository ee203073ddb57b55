#!/usr/bin/env bash
# image.sh builds strait's container image from the Dockerfile without a
# registry or a Docker engine: a static binary of this checkout, then
# `buildah bud` (or `docker build` where only Docker is installed), saved as a
# docker-archive that kind, k3s, containerd and docker all load.
#
# Usage: scripts/image.sh [--tag IMAGE] [--output FILE]
#   --tag     image name (default ghcr.io/strait-net/strait:latest, as deploy/ uses)
#   --output  archive path (default /var/cache/strait/images/<image>-<sha>.tar,
#             <sha> the binary's sha256 prefix: an unchanged binary is not rebuilt)
# stdout: the archive's path (only that line; progress goes to stderr).
#
# Then: kind load image-archive FILE | sudo k3s ctr images import FILE |
#       ctr -n k8s.io images import FILE | docker load -i FILE |
#       buildah push IMAGE docker://REGISTRY/strait:TAG
set -euo pipefail
die() { echo "image: error: $*" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tag=ghcr.io/strait-net/strait:latest
out=""
while (($#)); do
  case "$1" in
    --tag) tag="${2-}"; shift 2 ;;
    --output) out="${2-}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument \"$1\" (allowed: --tag IMAGE, --output FILE)" ;;
  esac
done
[[ -n "$tag" ]] || die "--tag must not be empty"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
version="0.1.0-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
( cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$ctx/strait" ./cmd/strait ) \
  || die "go build ./cmd/strait failed (see above)"
sha="$(sha256sum "$ctx/strait" | cut -c1-16)"
if [[ -z "$out" ]]; then
  out="/var/cache/strait/images/$(echo "$tag" | tr '/:' '__')-$sha.tar"
  if [[ -s "$out" ]]; then
    echo "$out"
    exit 0
  fi
fi
mkdir -p "$(dirname "$out")"
if command -v buildah >/dev/null; then
  buildah bud --quiet --layers=false -f "$root/Dockerfile" -t "$tag" "$ctx" >/dev/null
  rm -f "$out.tmp"
  buildah push --quiet "$tag" "docker-archive:$out.tmp:$tag" >/dev/null
  buildah rmi "$tag" >/dev/null 2>&1 || true
elif command -v docker >/dev/null; then
  docker build -q -f "$root/Dockerfile" -t "$tag" "$ctx" >/dev/null
  docker save -o "$out.tmp" "$tag"
else
  die "neither buildah nor docker found (scripts/setup.sh installs buildah)"
fi
mv -f "$out.tmp" "$out"
echo "image: $tag ($version) in $out" >&2
if [[ "$out" == /var/cache/strait/images/* ]]; then
  # Every commit's binary differs (its version is built in), so the cache
  # would grow by one archive per build: keep this image's newest four.
  ls -1t /var/cache/strait/images/"$(echo "$tag" | tr '/:' '__')"-*.tar 2>/dev/null | tail -n +5 | xargs -r rm -f -- || true
fi
echo "$out"
