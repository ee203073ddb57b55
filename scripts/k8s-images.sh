#!/usr/bin/env bash
# k8s-images.sh builds every image the lab's Kubernetes nodes run
# (scripts/k8s-nodes.sh), on this host, with no registry: each is FROM scratch
# plus binaries built here, made by buildah and saved as a docker-archive that
# `ctr -n k8s.io images import` loads.
#   registry.k8s.io/pause:3.10.1            Kubernetes' pause.c (k8s-tools.sh --nodes)
#   registry.k8s.io/coredns/coredns:v1.12.1 tools/coredns (k8s-tools.sh --nodes)
#   ghcr.io/strait-net/strait:lab           the Dockerfile, by scripts/image.sh; it
#                                           also serves the lab's workloads (strait app).
#                                           Not :latest, which kubelet always pulls:
#                                           overlays set the tag (kustomize images:)
#   localhost/strait-lab/curl:<version>     the host's curl and the libraries it loads
# The names are the ones the manifests use, so nothing is pulled.
#
# Usage: scripts/k8s-images.sh
# stdout: the archives, one path a line. Cached in /var/cache/strait/images:
# an archive is rebuilt only when its binary changed.
set -euo pipefail
die() { echo "k8s-images: error: $*" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache=/var/cache/strait/images
command -v buildah >/dev/null || die "buildah not found (scripts/setup.sh installs it)"
tools="$("$root/scripts/k8s-tools.sh" --nodes)"
mkdir -p "$cache"

# image NAME CTX: a FROM scratch image of the files in CTX (Containerfile
# included), cached by the hash of CTX's contents.
image() {
  local tag="$1" ctx="$2" sum out
  sum="$(cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
  out="$cache/$(echo "$tag" | tr '/:' '__')-$sum.tar"
  if [[ ! -s "$out" ]]; then
    buildah bud --quiet --layers=false -t "$tag" "$ctx" >/dev/null || die "buildah bud $tag failed"
    rm -f "$out.tmp"
    buildah push --quiet "$tag" "docker-archive:$out.tmp:$tag" >/dev/null || die "buildah push $tag failed"
    buildah rmi "$tag" >/dev/null 2>&1 || true
    mv -f "$out.tmp" "$out"
    echo "k8s-images: built $tag into $out" >&2
  fi
  echo "$out"
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mkdir "$work/pause"
cp "$tools/pause" "$work/pause/pause"
printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$work/pause/Containerfile"
image registry.k8s.io/pause:3.10.1 "$work/pause"

mkdir "$work/coredns"
cp "$tools/coredns" "$work/coredns/coredns"
printf 'FROM scratch\nCOPY coredns /coredns\nEXPOSE 53 53/udp\nENTRYPOINT ["/coredns"]\n' > "$work/coredns/Containerfile"
image registry.k8s.io/coredns/coredns:v1.12.1 "$work/coredns"

# curl with exactly the shared objects the host's dynamic loader resolves
# for it, at the same paths.
curl="$(command -v curl)" || die "curl not found (scripts/setup.sh installs it)"
ver="$(curl --version | awk 'NR == 1 {print $2}')"
mkdir -p "$work/curl/rootfs/usr/bin"
cp "$curl" "$work/curl/rootfs/usr/bin/curl"
ldd "$curl" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u | while read -r lib; do
  mkdir -p "$work/curl/rootfs$(dirname "$lib")"
  cp -L "$lib" "$work/curl/rootfs$lib"
done
printf 'FROM scratch\nCOPY rootfs/ /\nUSER 65532:65532\nENTRYPOINT ["/usr/bin/curl"]\n' > "$work/curl/Containerfile"
image "localhost/strait-lab/curl:$ver" "$work/curl"

"$root/scripts/image.sh" --tag ghcr.io/strait-net/strait:lab
