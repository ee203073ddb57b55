#!/usr/bin/env bash
# k8s-nodes.sh brings up Kubernetes clusters with real nodes on this host, for
# strait's end-to-end tests in real pods (docs/k8s-nodes.md). Each node is a
# network namespace of a strait lab (`strait lab up`, so the lab's links and
# their emulation join the clusters); in it run containerd (Debian's, runc,
# the CNI bridge plugin), kubelet and kube-proxy (nftables mode). The first
# node of a cluster also runs its control plane: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler. CoreDNS runs as a Deployment,
# as kubeadm and k3s deploy it. Binaries come from scripts/k8s-tools.sh
# --nodes, images from scripts/k8s-images.sh; nothing is pulled.
#
# Usage:
#   scripts/k8s-nodes.sh up   NAME [--clusters a,b] [--nodes N] [--wan SPEC]
#   scripts/k8s-nodes.sh down NAME
#   scripts/k8s-nodes.sh kubectl NAME CLUSTER [ARG...]   # kubectl on that cluster
#   scripts/k8s-nodes.sh env  NAME                        # what `up` printed
#   scripts/k8s-nodes.sh restart NAME CLUSTER DAEMON [NODE [DOWN]]
#       stop DAEMON (etcd, kube-apiserver, kube-controller-manager,
#       kube-scheduler, containerd, kubelet, kube-proxy) of node NODE (default
#       1; the control plane runs on 1), wait DOWN seconds (default 0), start
#       it again with the same command line: the faults of the e2e tests
#
# NAME is a lab name: 1-8 lowercase letters or digits. --wan is the emulation
# of every WAN link in topology-file form, e.g. '{delay: 5ms, rate: 1gbit}'.
# Cluster i (from 0) gets pods 10.(100+i).0.0/16 (node j: 10.(100+i).j.0/24)
# and services 10.(150+i).0.0/16 (DNS at .0.10); nodes are named
# <cluster>-n<j>. `down` removes everything `up` made, also after a crash:
# processes, containers, pod network namespaces, mounts, cgroups, the lab.
#
# Environment:
#   STRAIT          the strait binary (default: bin/strait of this checkout)
#   STRAIT_K8S_STATE  state directory (default /var/lib/strait-k8s)
set -euo pipefail

die() { echo "k8s-nodes: error: $*" >&2; exit 1; }
log() { echo "k8s-nodes: $*" >&2; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state_root="${STRAIT_K8S_STATE:-/var/lib/strait-k8s}"
# Unix socket paths must fit in 108 bytes: sockets live under /run.
run_root=/run/strait-k8s
strait="${STRAIT:-$root/bin/strait}"

usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; }

cmd="${1-}"
[[ -n "$cmd" ]] || { usage >&2; exit 2; }
shift
case "$cmd" in -h|--help) usage; exit 0 ;; esac
name="${1-}"
[[ "$name" =~ ^[a-z0-9]{1,8}$ ]] || die "NAME must be 1-8 lowercase letters or digits (a lab name), got \"$name\""
shift
S="$state_root/$name"
R="$run_root/$name"

# Cgroup v1 hierarchies (and the v2 one of a hybrid host) a node's kubelet
# and runc create cgroups in; every one gets the node's cgroup root.
cgroup_dirs() {
  local d
  for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [[ -e "$d/cgroup.procs" ]] && printf '%s\n' "${d%/}"
  done | sort -u
}

# killcg kills every process in the nodes' cgroups until none is left.
killcg() {
  local left i
  for i in $(seq 100); do
    left="$(find /sys/fs/cgroup/ -path "*/strait-k8s-$name-*" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true)"
    [[ -z "$left" ]] && return 0
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
    sleep 0.2
  done
}

# reap FINAL: steps 4 and 5 of down; fails while a cgroup is left. FINAL=1
# logs what is left.
reap() {
  local final="$1" busy=0 cg d f
  # 4. Whatever still runs in the nodes' cgroups is a container process of
  #    ours (a shim that died leaves them): kill it, and wait until every
  #    cgroup is empty, or unmounting and rmdir below find them busy.
  killcg
  # 5. Mounts below our directories (rootfs overlays, shm, pod network
  #    namespaces, kubelet's tmpfs volumes), deepest first; then cgroups,
  #    leaves first (rmdir only succeeds on empty ones).
  if [[ -f "$S/netns.list" ]]; then
    sort -u "$S/netns.list" | while read -r f; do
      umount "$f" 2>/dev/null || true
      rm -f "$f"
    done
  fi
  for d in "$S" "$R"; do
    [[ -d "$d" ]] || continue
    findmnt -rn -o TARGET | awk -v p="$d/" 'index($0, p) == 1' | sort -r | while read -r f; do
      umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null || { ((final)) && log "cannot unmount $f"; } || true
    done
  done
  for cg in $(cgroup_dirs); do
    for d in "$cg"/strait-k8s-"$name"-*; do
      [[ -d "$d" ]] || continue
      find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      if [[ -d "$d" ]]; then
        ((final)) && log "cgroup $d not empty (a process is still in it)"
        busy=1
      fi
    done
  done
  return "$busy"
}

# ---------------------------------------------------------------- down
# Removes what up made, in reverse, tolerating anything already gone.
down() {
  [[ -d "$S" || -d "$R" ]] || log "no state for $name in $S or $R"
  local node sock pid f d cg
  # 1. kubelets and kube-proxies first, so nothing restarts a container.
  for f in "$S"/*/*/pids/kubelet "$S"/*/*/pids/kube-proxy; do stop_pid "$f"; done
  # Also by command line (every daemon of this lab names a file below $S):
  # a pid file can be missing after a crash.
  stop_matching "/kubelet --config $S/"
  stop_matching "/kube-proxy --config $S/"
  # 2. Every container of every node's containerd: their pod network
  #    namespaces (bind mounts under /run/netns) are read from the sandbox
  #    specs before the containers go.
  for sock in "$R"/*/containerd.sock; do
    [[ -S "$sock" ]] || continue
    local ctr=(ctr --address "$sock" --namespace k8s.io)
    local ids
    ids="$("${ctr[@]}" containers list -q 2>/dev/null || true)"
    for id in $ids; do
      "${ctr[@]}" containers info "$id" 2>/dev/null \
        | jq -r '.Spec.linux.namespaces[]? | select(.type == "network") | .path // empty' \
        | grep '^/var/run/netns/\|^/run/netns/' >> "$S/netns.list" || true
      "${ctr[@]}" tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $ids; do
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        "${ctr[@]}" tasks delete -f "$id" >/dev/null 2>&1 && break
        "${ctr[@]}" tasks ls -q 2>/dev/null | grep -qx "$id" || break
        sleep 0.2
      done
      "${ctr[@]}" containers delete "$id" >/dev/null 2>&1 || true
    done
  done
  # Container processes die while their shims still run: a shim reaps its
  # container. Killed after the shims, they would be reparented to PID 1,
  # which on this host does not reap them, and their zombies keep the
  # cgroups busy for good (docs/k8s-nodes.md).
  killcg
  # 3. The daemons, control plane last.
  for f in "$S"/*/*/pids/containerd "$S"/*/cp/pids/kube-scheduler "$S"/*/cp/pids/kube-controller-manager \
           "$S"/*/cp/pids/kube-apiserver "$S"/*/cp/pids/etcd; do
    stop_pid "$f"
  done
  stop_matching "containerd --config $S/"
  stop_matching " $S/"
  # Shims listen in host-wide /run/containerd/s whatever the configuration
  # says, and a killed one leaves its socket: note ours (listed in the
  # nodes' namespaces) before they go.
  local shimsocks=""
  for f in $(ip netns list | awk -v p="st-$name-" 'index($1, p) == 1 {print $1}'); do
    shimsocks+=" $(ip netns exec "$f" ss -xlpn 2>/dev/null | awk '/containerd-shim/ && $5 ~ /^\/run\/containerd\/s\// {print $5}' || true)"
  done
  # Shims left by a containerd that died: they name its socket.
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $R/" 2>/dev/null || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  # shellcheck disable=SC2086
  rm -f $shimsocks
  # Steps 4 and 5 again while a cgroup is left: a killed container whose
  # shim is gone is reparented to PID 1, and its cgroup stays busy until PID
  # 1 reaps it (seconds on this host; cgroup.procs no longer lists it).
  local try
  for try in $(seq 60); do
    reap "$((try == 60))" && break
    sleep 1
  done
  # 6. The lab (its namespaces; lab down also kills what is left in them).
  "$strait" lab down "$name" >/dev/null 2>&1 || true
  rm -rf "$S" "$R"
  # Shims keep sockets and fifos in host-wide /run/containerd whatever the
  # configuration says; remove those directories once no containerd is left.
  # Kubelet's device-plugin directory is fixed (not below --root-dir).
  if ! pgrep -x kubelet >/dev/null; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
    rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
  fi
  if ! pgrep -x containerd >/dev/null; then
    rmdir /run/containerd/fifo /run/containerd/s /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd 2>/dev/null || true
  fi
  rm -rf /etc/netns/st-"$name"-* 2>/dev/null || true
  log "down: $name removed"
}

# stop_matching PATTERN: TERM, then KILL, the processes whose command line
# contains PATTERN (a path below this lab's state: nobody else's).
stop_matching() {
  local pids i
  pids="$(pgrep -f -- "$1" | grep -vx "$$" || true)"
  [[ -n "$pids" ]] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for i in $(seq 50); do
    # shellcheck disable=SC2086
    kill -0 $pids 2>/dev/null || return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

stop_pid() {
  local f="$1" pid i
  [[ -f "$f" ]] || return 0
  pid="$(cat "$f")"
  # Only a process that still runs the command we started (pids get reused).
  if [[ -n "$pid" && -r /proc/$pid/cmdline ]] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$(basename "$f")"; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# ---------------------------------------------------------------- helpers
# start NODEDIR NETNS BIN ARGS...: a daemon in a namespace, pid and log kept.
# nsenter --net, not `ip netns exec`: that also remounts /sys, which hides
# /sys/fs/cgroup, and runc then fails with "no cgroup mount found in
# mountinfo" (docs/k8s-nodes.md).
start() {
  local nd="$1" ns="$2" bin="$3"
  shift 3
  mkdir -p "$nd/pids" "$nd/logs"
  setsid nsenter --net="/run/netns/$ns" -- "$bin" "$@" >> "$nd/logs/$(basename "$bin").log" 2>&1 < /dev/null &
  echo $! > "$nd/pids/$(basename "$bin")"
}

kc() { # kc CLUSTER ARGS...: kubectl as admin on a cluster
  local c="$1"
  shift
  ip netns exec "$(cat "$S/$c/netns")" "$tools/kubectl" --kubeconfig "$S/$c/admin.kubeconfig" "$@"
}

# wait_for WHAT SECONDS COMMAND...: retry until it succeeds (a loaded host is slow).
wait_for() {
  local what="$1" secs="$2" t0=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    (( SECONDS - t0 < secs )) || die "$what: not ready after ${secs}s (logs in $S)"
    sleep 0.5
  done
  log "$what: ready after $(( SECONDS - t0 ))s"
}

# Cert and key signed by the cluster's CA: cert DIR NAME CN [SANS].
cert() {
  local dir="$1" n="$2" cn="$3" sans="${4-}"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$cn" \
    -keyout "$dir/$n.key" -out "$dir/$n.csr" 2>/dev/null
  local ext="$dir/$n.ext"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' > "$ext"
  [[ -z "$sans" ]] || printf 'subjectAltName=%s\n' "$sans" >> "$ext"
  openssl x509 -req -in "$dir/$n.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 30 -extfile "$ext" -out "$dir/$n.crt" 2>/dev/null
  rm -f "$dir/$n.csr" "$ext"
}

kubeconfig() { # kubeconfig FILE SERVER CA TOKEN
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$2", certificate-authority: "$3"}}]
users: [{name: u, user: {token: "$4"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
EOF
  chmod 600 "$1"
}

token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# ---------------------------------------------------------------- up
up() {
  local clusters=a,b nodes=1 wan=""
  while (($#)); do
    case "$1" in
      --clusters) clusters="${2-}"; shift 2 ;;
      --nodes) nodes="${2-}"; shift 2 ;;
      --wan) wan="${2-}"; shift 2 ;;
      *) die "unknown argument \"$1\" (allowed: --clusters a,b, --nodes N, --wan SPEC)" ;;
    esac
  done
  [[ "$nodes" =~ ^[1-9]$ ]] || die "--nodes must be 1-9, got \"$nodes\""
  IFS=, read -r -a cl <<< "$clusters"
  ((${#cl[@]} >= 1 && ${#cl[@]} <= 50)) || die "--clusters must name 1-50 clusters, got \"$clusters\""
  local c
  for c in "${cl[@]}"; do
    [[ "$c" =~ ^[a-z0-9]{1,8}$ ]] || die "--clusters: \"$c\" is not 1-8 lowercase letters or digits"
  done
  [[ $(id -u) == 0 ]] || die "needs root (network namespaces, mounts, cgroups)"
  [[ ! -e "$S" ]] || die "$S exists: '$0 down $name' first"
  [[ -x "$strait" ]] || die "no strait binary at $strait (scripts/setup.sh builds bin/strait; or set STRAIT)"
  local need
  for need in containerd ctr runc openssl jq nft findmnt; do
    command -v "$need" >/dev/null || die "$need not found (scripts/setup.sh installs it)"
  done
  [[ -x /usr/lib/cni/bridge ]] || die "no CNI plugins in /usr/lib/cni (scripts/setup.sh installs containernetworking-plugins)"
  tools="$("$root/scripts/k8s-tools.sh" --nodes)"
  local images
  images="$("$root/scripts/k8s-images.sh")"
  local t0=$SECONDS
  mkdir -p "$S" "$R"

  # The lab: node n1 of each cluster carries the WAN links.
  {
    echo "name: $name"
    echo "clusters:"
    for c in "${cl[@]}"; do
      printf '  - name: %s\n    nodes: [{name: n1, gateway: true}' "$c"
      for ((j = 2; j <= nodes; j++)); do printf ', {name: n%d}' "$j"; done
      printf ']\n'
    done
    if ((${#cl[@]} > 1)); then
      echo "wan:"
      for ((i = 0; i < ${#cl[@]}; i++)); do
        for ((k = i + 1; k < ${#cl[@]}; k++)); do
          printf '  - between: [%s, %s]\n' "${cl[i]}" "${cl[k]}"
          [[ -z "$wan" ]] || printf '    emulation: %s\n' "$wan"
        done
      done
    fi
  } > "$S/topology.yaml"
  "$strait" lab up "$S/topology.yaml" > "$S/lab-status.txt" || die "strait lab up failed (see above)"

  local i j
  for ((i = 0; i < ${#cl[@]}; i++)); do up_cluster "$i" "${cl[i]}" "$nodes" "$images"; done
  for c in "${cl[@]}"; do
    for ((j = 1; j <= nodes; j++)); do
      wait_for "node $c-n$j Ready" 300 node_ready "$c" "$c-n$j"
    done
    wait_for "$c: CoreDNS available" 300 kc "$c" -n kube-system wait --for=condition=Available --timeout=1s deployment/coredns
  done
  log "up: $name in $(( SECONDS - t0 ))s"
  env_lines | tee "$S/env"
}

node_ready() {
  [[ "$(kc "$1" get node "$2" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

# Node address (on lo of the node's namespace) from the lab.
lab_node() { # lab_node CLUSTER NODE -> "netns addr"
  awk -v id="$1/$2" '$1 == id {print $2, $3}' "$S/lab-status.txt"
}

up_cluster() {
  local i="$1" c="$2" nodes="$3" images="$4"
  local cd="$S/$c"
  mkdir -p "$cd/pki"
  local pods="10.$((100 + i)).0.0/16" svcs="10.$((150 + i)).0.0/16"
  local apiip="10.$((150 + i)).0.1" dnsip="10.$((150 + i)).0.10"
  local ns addr
  read -r ns addr < <(lab_node "$c" n1)
  [[ -n "$addr" ]] || die "no lab node $c/n1 in 'strait lab status $name'"
  addr="${addr%/*}"
  echo "$ns" > "$cd/netns"
  echo "$addr" > "$cd/apiserver"
  local server="https://$addr:6443"

  # PKI: a CA, the API server's serving certificate, the service-account
  # keys; clients authenticate with static tokens (one per identity).
  local p="$cd/pki"
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj "/CN=strait-k8s-$name-$c-ca" -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  cert "$p" apiserver kube-apiserver \
    "IP:$addr,IP:$apiip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  local admin kproxy
  admin="$(token)"
  kproxy="$(token)"
  {
    echo "$admin,admin,admin,system:masters"
    echo "$kproxy,system:kube-proxy,kube-proxy"
  } > "$p/tokens.csv"
  kubeconfig "$cd/admin.kubeconfig" "$server" "$p/ca.crt" "$admin"
  kubeconfig "$cd/kube-proxy.kubeconfig" "$server" "$p/ca.crt" "$kproxy"
  local j
  for ((j = 1; j <= nodes; j++)); do
    local t
    t="$(token)"
    echo "$t,system:node:$c-n$j,node-$c-n$j,system:nodes" >> "$p/tokens.csv"
    kubeconfig "$cd/kubelet-n$j.kubeconfig" "$server" "$p/ca.crt" "$t"
  done
  chmod 600 "$p"/*.key "$p/tokens.csv"

  # Control plane on n1.
  local cp="$cd/cp"
  mkdir -p "$cp"
  start "$cp" "$ns" "$tools/etcd" --name "$c" --data-dir "$cp/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$c=http://127.0.0.1:2380" --log-level warn
  start "$cp" "$ns" "$tools/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --advertise-address "$addr" --secure-port 6443 --cert-dir "$cp/apiserver-certs" \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --client-ca-file "$p/ca.crt" --token-auth-file "$p/tokens.csv" \
    --service-cluster-ip-range "$svcs" --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=true \
    --kubelet-preferred-address-types InternalIP --v 1
  wait_for "$c: kube-apiserver" 180 kc "$c" get --raw /readyz
  start "$cp" "$ns" "$tools/kube-controller-manager" --kubeconfig "$cd/admin.kubeconfig" \
    --authentication-kubeconfig "$cd/admin.kubeconfig" --authorization-kubeconfig "$cd/admin.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-cidr "$pods" --service-cluster-ip-range "$svcs" --v 1
  start "$cp" "$ns" "$tools/kube-scheduler" --kubeconfig "$cd/admin.kubeconfig" \
    --authentication-kubeconfig "$cd/admin.kubeconfig" --authorization-kubeconfig "$cd/admin.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --v 1

  for ((j = 1; j <= nodes; j++)); do up_node "$i" "$c" "$j" "$nodes" "$images" "$dnsip"; done
  coredns "$c" "$dnsip"
}

up_node() {
  local i="$1" c="$2" j="$3" nodes="$4" images="$5" dnsip="$6"
  local n="$c-n$j" nd="$S/$c/n$j" rd="$R/$c-n$j" ns addr
  read -r ns addr < <(lab_node "$c" "n$j")
  addr="${addr%/*}"
  mkdir -p "$nd" "$rd" "$nd/cni"
  local podnet="10.$((100 + i)).$j.0/24" podgw="10.$((100 + i)).$j.1"
  # Pods on other nodes of the cluster: via the lab's route to that node.
  local k
  for ((k = 1; k <= nodes; k++)); do
    ((k == j)) && continue
    local other via
    other="$(lab_node "$c" "n$k" | awk '{print $2}')"
    via="$(ip -n "$ns" -o route get "${other%/*}" | awk '{for (i = 1; i < NF; i++) if ($i == "via" || $i == "dev") printf " %s %s", $i, $(i+1)}')"
    # shellcheck disable=SC2086 # via is "via X dev Y"
    ip -n "$ns" route replace "10.$((100 + i)).$k.0/24" $via
  done
  # Service traffic between pods of one bridge goes through the node's
  # conntrack (kube-proxy's DNAT) only when bridged frames meet netfilter.
  ip netns exec "$ns" sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.ipv4.ip_forward=1
  # Gateway pods listen on clusterset IPs: every node may host one (README,
  # "Deploying").
  ip -n "$ns" route replace local 10.255.0.0/16 dev lo
  # Host-network processes (the gateways' sync sidecar) reach Services:
  # a connect() needs a route before kube-proxy's output DNAT rewrites the
  # address, and lab nodes have no default route ("network is unreachable").
  ip -n "$ns" route replace "10.$((150 + i)).0.0/16" dev lo
  # Pods reach other clusters' nodes (the broker) from the node's address:
  # the lab routes node addresses only.
  ip netns exec "$ns" nft -f - <<EOF
table ip strait-k8s-masq {
  chain post {
    type nat hook postrouting priority srcnat;
    ip saddr 10.$((100 + i)).0.0/16 ip daddr != 10.$((100 + i)).0.0/16 oifname != "cni0" masquerade
  }
}
EOF

  # Cgroups: a root per node in every hierarchy, so that nodes do not share
  # kubepods and `down` finds what to remove.
  local cgroot="/strait-k8s-$name-$n" cg
  for cg in $(cgroup_dirs); do mkdir -p "$cg$cgroot"; done

  cat > "$nd/cni/10-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "strait-k8s-$n",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$nd/ipam", "ranges": [[{"subnet": "$podnet", "gateway": "$podgw"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat > "$nd/containerd.toml" <<EOF
version = 2
root = "$nd/containerd"
state = "$rd/containerd"
[grpc]
  address = "$rd/containerd.sock"
[ttrpc]
  address = "$rd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.1"
  # Pods' network namespaces below the state directory, not in the
  # host-wide /run/netns: down finds them, and ip netns lists only labs.
  netns_mounts_under_state_dir = true
  # Kubelet asks for oom_score_adj down to -998 (pause, guaranteed pods);
  # lowering it needs CAP_SYS_RESOURCE, which root lacks on this host
  # (runc: "failed to update /proc/self/oom_score_adj: Permission denied").
  # Keep it at containerd's own (docs/k8s-nodes.md).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state per node: the default /run/containerd/runc is shared
        # by every containerd on the host.
        Root = "$rd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$nd/cni"
[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/opt"
EOF
  start "$nd" "$ns" "$(command -v containerd)" --config "$nd/containerd.toml"
  wait_for "$n: containerd" 60 ctr --address "$rd/containerd.sock" version
  local img
  for img in $images; do
    ctr --address "$rd/containerd.sock" --namespace k8s.io images import --no-unpack "$img" >/dev/null \
      || die "ctr images import $img into $n failed"
  done

  echo "nameserver $dnsip" > "$nd/resolv.conf"
  cat > "$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# docs/k8s-nodes.md says why each of these is set.
cgroupDriver: cgroupfs
cgroupRoot: $cgroot
failSwapOn: false
failCgroupV1: false
address: $addr
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDNS: [$dnsip]
clusterDomain: cluster.local
resolvConf: $nd/resolv.conf
podLogsDir: $nd/pod-logs
containerRuntimeEndpoint: unix://$rd/containerd.sock
imageServiceEndpoint: unix://$rd/containerd.sock
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
localStorageCapacityIsolation: false
makeIPTablesUtilChains: false
registerNode: true
serializeImagePulls: false
EOF
  start "$nd" "$ns" "$tools/kubelet" --config "$nd/kubelet.yaml" --kubeconfig "$S/$c/kubelet-n$j.kubeconfig" \
    --root-dir "$nd/kubelet" --cert-dir "$nd/kubelet/pki" --hostname-override "$n" --node-ip "$addr" --v 1

  cat > "$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: $S/$c/kube-proxy.kubeconfig}
hostnameOverride: $n
clusterCIDR: 10.$((100 + i)).0.0/16
bindAddress: $addr
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Conntrack limits are host-wide sysctls: leave them to the host.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, udpTimeout: 0s, udpStreamTimeout: 0s}
EOF
  start "$nd" "$ns" "$tools/kube-proxy" --config "$nd/kube-proxy.yaml" --v 1
}

# CoreDNS as kubeadm deploys it, with k3s's import of ConfigMap
# kube-system/coredns-custom (the form deploy/dns uses). There is no
# upstream resolver in the lab: names outside the cluster do not resolve.
coredns() {
  local c="$1" dnsip="$2"
  kc "$c" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        prometheus :9153
        cache 30
        loop
        reload
        loadbalance
        import /etc/coredns/custom/*.override
    }
    import /etc/coredns/custom/*.server
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      containers:
        - name: coredns
          image: registry.k8s.io/coredns/coredns:v1.12.1
          args: [-conf, /etc/coredns/Corefile]
          ports:
            - {name: dns, containerPort: 53, protocol: UDP}
            - {name: dns-tcp, containerPort: 53, protocol: TCP}
            - {name: metrics, containerPort: 9153, protocol: TCP}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {add: [NET_BIND_SERVICE], drop: [ALL]}
          readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
          livenessProbe: {httpGet: {path: /health, port: 8080}, initialDelaySeconds: 60, timeoutSeconds: 5}
          volumeMounts:
            - {name: config, mountPath: /etc/coredns, readOnly: true}
            - {name: custom, mountPath: /etc/coredns/custom, readOnly: true}
      volumes:
        - name: config
          configMap: {name: coredns, items: [{key: Corefile, path: Corefile}]}
        - name: custom
          configMap: {name: coredns-custom, optional: true}
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $dnsip
  selector: {k8s-app: kube-dns}
  ports:
    - {name: dns, port: 53, protocol: UDP}
    - {name: dns-tcp, port: 53, protocol: TCP}
    - {name: metrics, port: 9153, protocol: TCP}
EOF
}

# restart_daemon CLUSTER DAEMON [NODE [DOWN]]: see the usage.
restart_daemon() {
  local c="${1-}" d="${2-}" j="${3:-1}" down="${4:-0}" dir pid ns
  [[ -f "$S/$c/netns" ]] || die "restart: no cluster \"$c\" in $S"
  [[ "$j" =~ ^[1-9][0-9]*$ ]] || die "restart: NODE must be a node number (1, 2, ...), got \"$j\""
  [[ "$down" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "restart: DOWN must be seconds, got \"$down\""
  case "$d" in
    etcd | kube-apiserver | kube-controller-manager | kube-scheduler)
      [[ "$j" == 1 ]] || die "restart: $d runs on node 1 only"
      dir="$S/$c/cp" ;;
    containerd | kubelet | kube-proxy) dir="$S/$c/n$j" ;;
    *) die "restart: DAEMON must be etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet or kube-proxy, got \"$d\"" ;;
  esac
  [[ -f "$dir/pids/$d" ]] || die "restart: no $dir/pids/$d (is node $j of cluster $c up?)"
  pid="$(cat "$dir/pids/$d")"
  [[ -r "/proc/$pid/cmdline" ]] || die "restart: $d (pid $pid) is not running"
  ns="$(ip netns identify "$pid")"
  [[ -n "$ns" ]] || die "restart: $d (pid $pid) is in no named network namespace"
  # The command line as started: argv[0] is the binary's path.
  local -a args
  mapfile -d '' -t args < "/proc/$pid/cmdline"
  [[ "$(basename "${args[0]}")" == "$d" ]] || die "restart: pid $pid runs ${args[0]}, not $d"
  stop_pid "$dir/pids/$d"
  sleep "$down"
  start "$dir" "$ns" "${args[@]}"
  log "$d of $c-n$j restarted: pid $(cat "$dir/pids/$d")"
}

env_lines() {
  local c
  for c in "$S"/*/netns; do
    c="$(basename "$(dirname "$c")")"
    printf 'cluster %s netns %s apiserver %s kubeconfig %s\n' "$c" "$(cat "$S/$c/netns")" \
      "$(cat "$S/$c/apiserver")" "$S/$c/admin.kubeconfig"
  done
}

case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  kubectl)
    c="${1-}"
    [[ -f "$S/$c/netns" ]] || die "no cluster \"$c\" in $S"
    shift
    tools="$("$root/scripts/k8s-tools.sh" --nodes)"
    kc "$c" "$@"
    ;;
  env) [[ -f "$S/env" ]] || die "no $S/env: is $name up?"; cat "$S/env" ;;
  restart) restart_daemon "$@" ;;
  *) die "unknown command \"$cmd\" (allowed: up, down, kubectl, env, restart, --help)" ;;
esac
