#!/usr/bin/env bash
# bpf.sh compiles the C programs of the packages that load BPF (packet:
# packet/bpf/packet.c; tunnel/wancc: tunnel/wancc/bpf/wancc.c) into BPF
# objects and their Go bindings with bpf2go (the version go.mod pins). The
# outputs are committed, so building strait needs no clang; run this (or
# `make bpf`) after editing the C, and each package's TestGeneratedUpToDate
# fails until you do. The compiler is pinned to Debian's clang-14: another
# version emits different instructions. Run as root the first time: it
# installs clang.
#
# Usage: scripts/bpf.sh [PACKAGE OUTPUT_DIR]   (default: every package, in place)
set -euo pipefail
cd "$(dirname "$0")/.."

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
# generate DIR OUTPUT_DIR: DIR/bpf/NAME.c, NAME the package's name, into
# NAME_bpfel.{o,go} and NAME_bpfeb.{o,go}.
generate() {
	local dir=$1 out name
	out=$(realpath -m "$2")
	name=$(basename "$dir")
	mkdir -p "$out"
	(cd "$dir" && GOPACKAGE=$name go tool bpf2go -no-global-types -cc clang-14 -strip llvm-strip-14 \
		-target bpfel,bpfeb -output-dir "$out" \
		"$name" "$(pwd)/bpf/$name.c" -- -O2 -g -Wall -Werror -I"/usr/include/$multiarch")
}
if (($# == 2)); then
	generate "$1" "$2"
else
	generate packet packet
	generate tunnel/wancc tunnel/wancc
fi
