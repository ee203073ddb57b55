#!/usr/bin/env bash
# udp-overhead.sh measures UDP request/response through strait against direct
# routing in a two-cluster lab (a: gateway + server, b: gateway + client), with
# strait load udp against strait load udp-server: the same client, server and
# rate through the import (10.96.0.51, b's clusterset IP) and straight to the
# server, alternating, REPS times. Prints one line per run and the medians.
# Run as root after scripts/setup.sh; it makes and removes its own lab.
#
#	scripts/udp-overhead.sh [REPS] [RATE] [DURATION] [SIZE]   # default 5 1000 5s 64
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/bin/strait
reps=${1:-5} rate=${2:-1000} dur=${3:-5s} size=${4:-64}
lab=udpo$(($$ % 10000))   # a lab name has at most 8 characters
dir=$(mktemp -d /tmp/strait-udp-overhead-XXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	"$bin" lab down "$lab" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT
ns() { echo "st-$lab-$1"; }

cat >"$dir/topo.yaml" <<Y
name: $lab
clusters:
  - name: a
    nodes: [{name: gw, gateway: true}, {name: server}]
  - name: b
    nodes: [{name: gw, gateway: true}, {name: client}]
wan:
  - between: [a, b]
Y
"$bin" lab up "$dir/topo.yaml" >/dev/null
addr() { "$bin" lab status "$lab" | awk -v n="$1" '$1 == n {print $3}'; }
agw=$(addr a/gw) bgw=$(addr b/gw) srv=$(addr a/server)
# b's gateway holds the clusterset range; the client routes it there.
ip -n "$(ns b-gw)" route add local 10.96.0.0/24 dev lo
route=$(ip -n "$(ns b-client)" -o route get "$bgw")
via=$(grep -o 'via [^ ]*' <<<"$route" || true)
ip -n "$(ns b-client)" route add 10.96.0.0/24 $via $(grep -o 'dev [^ ]*' <<<"$route")

"$bin" fabric init --dir "$dir/ca" --clusterset udpo >/dev/null
for c in a b; do "$bin" fabric issue $c --dir "$dir/ca" >/dev/null; done
allow='apiVersion: strait.dev/v1alpha1
kind: AccessPolicy
metadata: {name: all}
spec: {priority: 1000, action: allow}'
cat >"$dir/a.yaml" <<Y
$allow
---
apiVersion: strait.dev/v1alpha1
kind: Peer
metadata: {name: b}
spec: {gateways: ["$bgw:4443"]}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: uecho, namespace: default}
spec: {ports: [{name: udp, protocol: UDP, port: 7001, target: "$srv:7001"}]}
Y
cat >"$dir/b.yaml" <<Y
$allow
---
apiVersion: strait.dev/v1alpha1
kind: Peer
metadata: {name: a}
spec: {gateways: ["$agw:4443"]}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: uecho, namespace: default}
spec: {type: ClusterSetIP, ips: [10.96.0.51], ports: [{name: udp, protocol: UDP, port: 7001}], clusters: [{cluster: a}]}
Y
for c in a b; do
	ip=$agw
	[ $c = b ] && ip=$bgw
	printf 'cluster: %s\nidentity: {dir: %s}\nlisten: %s:4443\nadmin: %s\nstate: %s\nresources: [%s]\n' \
		$c "$dir/ca" "$ip" "$dir/$c.sock" "$dir/$c.state" "$dir/$c.yaml" >"$dir/$c-gw.yaml"
	ip netns exec "$(ns $c-gw)" "$bin" gateway --config "$dir/$c-gw.yaml" >"$dir/$c.log" 2>&1 &
	pids+=($!)
done
ip netns exec "$(ns a-server)" "$bin" load udp-server --listen "$srv:7001" >"$dir/srv.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	"$bin" gateway status --gateway "$dir/b.sock" 2>/dev/null | grep -q 'live' && break
	sleep 0.1
done

echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/') rate=$rate size=$size duration=$dur reps=$reps"
for r in $(seq "$reps"); do
	for tool in direct strait; do
		to=$srv:7001
		[ $tool = strait ] && to=10.96.0.51:7001
		ip netns exec "$(ns b-client)" "$bin" load udp --addr "$to" --rate "$rate" --duration "$dur" \
			--size "$size" --json "$dir/$tool-$r.json" >/dev/null
	done
done
echo "# $(uptime | sed 's/.*load/load/')"
python3 - "$dir" "$reps" <<'P'
import json, statistics, sys
d, reps = sys.argv[1], int(sys.argv[2])
med = {}
for tool in ("direct", "strait"):
    rows = [json.load(open(f"{d}/{tool}-{r}.json")) for r in range(1, reps + 1)]
    for r in rows:
        l = r["latency"]
        print(f'{tool:6} sent {r["sent"]} lost {r["lost"]} ({r["loss_pct"]:.3f}%, late {r["late"]}) corrupt {r["corrupt"]} '
              f'iqr-mean {r["iqr_mean_us"]:.1f}us p50 {l["p50_us"]} p99 {l["p99_us"]}')
    med[tool] = statistics.median(r["iqr_mean_us"] for r in rows)
print(f'median IQR mean: direct {med["direct"]:.1f}us strait {med["strait"]:.1f}us '
      f'(+{med["strait"] - med["direct"]:.1f}us, {med["strait"] / med["direct"]:.2f}x)')
P
