#!/usr/bin/env bash
# bpf.sh compiles package packet's C programs (packet/bpf/*.c) into BPF
# objects and their Go bindings with bpf2go (the version go.mod pins). The
# outputs are committed, so building strait needs no clang; run this (or
# `make bpf`) after editing the C, and TestGeneratedUpToDate fails until you
# do. The compiler is pinned to Debian's clang-14: another version emits
# different instructions. Run as root the first time: it installs clang.
#
# Usage: scripts/bpf.sh [OUTPUT_DIR]   (default: packet/, in place)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-packet}")

want=()
command -v clang-14 >/dev/null 2>&1 || want+=(clang-14)
command -v llvm-strip-14 >/dev/null 2>&1 || want+=(llvm-14)
[[ -e /usr/include/bpf/bpf_helpers.h ]] || want+=(libbpf-dev)
[[ -e /usr/include/linux/bpf.h ]] || want+=(linux-libc-dev)
if ((${#want[@]})); then
	# bpftool is not needed to build, but it comes along to inspect what
	# is loaded.
	command -v bpftool >/dev/null 2>&1 || want+=(bpftool)
	if [[ $(id -u) != 0 ]]; then
		echo "bpf: need root to install: ${want[*]}" >&2
		exit 1
	fi
	echo "bpf: installing ${want[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
fi

# <asm/types.h> lives in the multiarch include directory, which clang does
# not search for -target bpf.
multiarch=$(gcc -print-multiarch 2>/dev/null || echo "$(uname -m)-linux-gnu")
mkdir -p "$out"
src=$(pwd)/packet/bpf/packet.c
(cd packet && GOPACKAGE=packet go tool bpf2go -no-global-types -cc clang-14 -strip llvm-strip-14 \
	-target bpfel,bpfeb -output-dir "$out" \
	packet "$src" -- -O2 -g -Wall -Werror -I"/usr/include/$multiarch")
