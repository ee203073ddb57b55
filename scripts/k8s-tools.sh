#!/usr/bin/env bash
# k8s-tools.sh builds the Kubernetes control-plane binaries that strait's
# Kubernetes tests run against (envtest style: a real etcd + kube-apiserver,
# no controllers) from the Go modules pinned in tools/k8s/go.mod + go.sum.
# With --nodes it also builds what real nodes need (scripts/k8s-nodes.sh):
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy (same module),
# CoreDNS (tools/coredns) and the pause binary (Kubernetes' build/pause/linux/
# pause.c from the same module, compiled static with the host's cc).
# Nothing prebuilt is downloaded: only Go modules, through the module proxy.
#
# Usage:
#   export KUBEBUILDER_ASSETS="$(scripts/k8s-tools.sh)"
#   scripts/k8s-tools.sh --env     # prints: export KUBEBUILDER_ASSETS='...'
#   scripts/k8s-tools.sh --nodes   # also the node binaries; prints the dir
#
# stdout: the directory holding kube-apiserver, etcd and kubectl (only that
# line; progress goes to stderr). Idempotent: a binary is built only when it is
# missing from the directory, so repeated runs cost milliseconds.
#
# Environment:
#   STRAIT_K8S_TOOLS   cache directory (default /var/cache/strait/k8s-<version>,
#                      outside the checkout; <version> comes from tools/k8s/go.mod)
#   STRAIT_K8S_JOBS    parallel compile jobs (default: number of CPUs, max 4)
#   STRAIT_K8S_REBUILD=1  rebuild all three binaries even if present
set -euo pipefail

die() { echo "k8s-tools: error: $*" >&2; exit 1; }
log() { echo "k8s-tools: $*" >&2; }

mode=dir
nodes=0
for arg in "$@"; do
  case "$arg" in
    --env) mode=env ;;
    --nodes) nodes=1 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument \"$arg\" (allowed: --env, --nodes, --help)" ;;
  esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="$root/tools/k8s"
[[ -f "$mod/go.mod" && -f "$mod/go.sum" ]] || die "missing $mod/go.mod or go.sum"
command -v go >/dev/null || die "go not found in PATH"

# One source of truth for versions: the pinned go.mod.
k8s_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")"
[[ -n "$k8s_version" ]] || die "no k8s.io/kubernetes version in $mod/go.mod"
[[ -n "$etcd_version" ]] || die "no go.etcd.io/etcd/server/v3 version in $mod/go.mod"
dnsmod="$root/tools/coredns"
coredns_version="$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3; exit}' "$dnsmod/go.mod")"
[[ -n "$coredns_version" ]] || die "no github.com/coredns/coredns version in $dnsmod/go.mod"

dir="${STRAIT_K8S_TOOLS:-/var/cache/strait/k8s-$k8s_version}"
[[ "$dir" == /* ]] || die "STRAIT_K8S_TOOLS must be an absolute path, got \"$dir\""
case "$dir/" in
  "$root"/*) die "cache directory $dir is inside the checkout $root; set STRAIT_K8S_TOOLS elsewhere" ;;
esac

emit() {
  if [[ "$mode" == env ]]; then
    printf "export KUBEBUILDER_ASSETS='%s'\n" "$dir"
  else
    printf '%s\n' "$dir"
  fi
}

bins=(kube-apiserver etcd kubectl)
if [[ "$nodes" == 1 ]]; then
  bins+=(kube-controller-manager kube-scheduler kubelet kube-proxy coredns pause)
fi
# coredns and pause come from elsewhere than the k8s.io/kubernetes version the
# directory is named after: a stamp beside them says which version they are.
declare -A stamp=([coredns]="$coredns_version" [pause]="$k8s_version")
built() {
  [[ -x "$dir/$1" ]] || return 1
  [[ -z "${stamp[$1]-}" ]] || [[ "$(cat "$dir/.$1.version" 2>/dev/null)" == "${stamp[$1]}" ]]
}
have_all() {
  local b
  for b in "${bins[@]}"; do built "$b" || return 1; done
}

if [[ "${STRAIT_K8S_REBUILD:-0}" != 1 ]] && have_all; then
  emit
  exit 0
fi

mkdir -p "$dir" 2>/dev/null || die "cannot create $dir (set STRAIT_K8S_TOOLS to a writable directory)"
[[ -w "$dir" ]] || die "$dir is not writable (set STRAIT_K8S_TOOLS to a writable directory)"

# Serialize concurrent runs (e.g. several test packages starting at once).
exec 9>"$dir/.lock"
if command -v flock >/dev/null; then
  flock 9 || die "cannot lock $dir/.lock"
fi

declare -A pkg=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
)
todo=()
for b in "${bins[@]}"; do
  if [[ "${STRAIT_K8S_REBUILD:-0}" == 1 ]] || ! built "$b"; then todo+=("$b"); fi
done
if [[ ${#todo[@]} -eq 0 ]]; then # another run built them while we waited
  emit
  exit 0
fi

# Version stamps, as Kubernetes' hack/lib/version.sh sets them, so that
# --version and the apiserver's /version report the pinned release.
major="${k8s_version#v}"; major="${major%%.*}"
minor="${k8s_version#v*.}"; minor="${minor%%.*}"
vflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  vflags+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  vflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

ncpu="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
jobs="${STRAIT_K8S_JOBS:-$(( ncpu < 4 ? ncpu : 4 ))}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "STRAIT_K8S_JOBS must be a positive integer, got \"$jobs\""

tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

log "building ${todo[*]} (kubernetes $k8s_version, etcd $etcd_version, coredns $coredns_version) into $dir, -p $jobs; a cold build takes 6-14 min on 2 cores (--nodes: about 20 more)"
start=$SECONDS
goflags=(GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local)
for b in "${todo[@]}"; do
  case "$b" in
  coredns)
    ( cd "$dnsmod" && env "${goflags[@]}" go build -p "$jobs" -trimpath -ldflags "-s -w" -o "$tmp/$b" . ) \
      || die "go build ./tools/coredns failed (see above)"
    ;;
  pause)
    # Kubernetes' own pause.c (PID 1 of every pod sandbox: reaps zombies,
    # exits on SIGINT/SIGTERM), static like upstream's image has it.
    command -v cc >/dev/null || die "cc not found: the pause binary is C (apt-get install gcc libc6-dev)"
    src="$( cd "$mod" && GOWORK=off GOFLAGS=-mod=readonly go mod download -json k8s.io/kubernetes \
      | awk -F'"' '$2 == "Dir" {print $4}' )/build/pause/linux/pause.c"
    [[ -f "$src" ]] || die "no $src in the k8s.io/kubernetes module"
    cc -Os -Wall -Werror -static -DVERSION="$k8s_version" -o "$tmp/$b" "$src" || die "cc $src failed (see above)"
    strip "$tmp/$b" 2>/dev/null || true
    ;;
  *)
  # One go build per binary: the build cache shares compiled packages, and a
  # failure names the binary that broke.
  # -mod=readonly + the checked-in go.sum: the exact pinned module versions are
  # used, and a go.mod/go.sum that needs changes is an error, not an edit.
  # GOWORK=off: a go.work above the checkout must not change the build list.
  # -buildvcs=false: no stamp from the checkout's git state (reproducible).
  # CGO_ENABLED=0: static binaries, as Kubernetes ships them.
  ( cd "$mod" && env "${goflags[@]}" \
      go build -p "$jobs" -trimpath -ldflags "-s -w$vflags" -o "$tmp/$b" "${pkg[$b]}" ) \
    || die "go build ${pkg[$b]} failed (see above)"
    ;;
  esac
  mv -f "$tmp/$b" "$dir/$b" # atomic within one filesystem: no half-written binaries
  if [[ -n "${stamp[$b]-}" ]]; then printf '%s\n' "${stamp[$b]}" > "$dir/.$b.version"; fi
  log "built $b ($(( SECONDS - start ))s)"
done
printf 'kubernetes %s\netcd %s\ncoredns %s\n' "$k8s_version" "$etcd_version" "$coredns_version" > "$dir/VERSIONS"
log "done in $(( SECONDS - start ))s"
emit
