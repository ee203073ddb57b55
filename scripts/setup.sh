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
	[chromium]=chromium [fc-list]=fontconfig
)
missing=()
for cmd in "${!want[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${want[$cmd]}")
done
# The HTML report's SVG text is measured with Liberation Sans; without the
# font, browsers substitute another and labels may overflow.
[[ -e /usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf ]] || missing+=(fonts-liberation)
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

if ! command -v go >/dev/null 2>&1; then
	echo "setup: Go is not installed; install Go ≥ 1.24 (the go command fetches the exact toolchain go.mod names)" >&2
	exit 1
fi

mkdir -p bin
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
go build -ldflags "-X main.version=0.1.0-${commit}" -o bin/strait ./cmd/strait
echo "setup: built bin/strait ($(bin/strait --version))"
