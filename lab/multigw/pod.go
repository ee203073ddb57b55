package multigw

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// pod is a network namespace behind the client node, where the failover
// experiment's probe client runs, as a Kubernetes pod runs behind its node.
//
// Why not on the client node itself: the node routes the import's VIP
// through a resilient nexthop group, which keeps a bucket's gateway while
// the bucket is busy. A bucket is busy when a route lookup selects it, and
// a socket of the node's own caches its route: an established connection
// from the node itself never looks the group up again, so its bucket looks
// idle after idle_timer and, when a restarted gateway rejoins the group,
// moves to it — the connection's next packet lands on a gateway that never
// saw it and is reset. Measured with two gateways and 16 connections
// sending every 10 ms: re-adding a gateway reset 3 connections that ran
// through the other one when they originated on the node, none when they
// came from a namespace behind it (forwarded packets are looked up one by
// one). The node masquerades the pod's address, so the gateways need no
// route to it.
//
// The masquerade puts the node's conntrack in the path, and a connection
// whose SYN went unanswered leaves an entry in SYN_SENT for its timeout
// (120 s by default). At 2000 new connections/s the probe client comes
// round its port range within the run, and the next SYN on such a tuple
// (another ISN, outside the old entry's window) is not forwarded: every
// connection lost while a gateway was gone failed once more when its
// ports came round, long after the gateway returned (docs/failover.md,
// "Uplink down": 516–580 lost after the return, 0–6 with the timeout
// below). The node's SYN_SENT timeout is therefore the probe's own
// timeout: a probe that got no answer by then has given up its socket.
type pod struct {
	netns string
	node  string // the client node's namespace
}

const (
	podNodeAddr = "10.250.0.1/30"
	podAddr     = "10.250.0.2/30"
	podGateway  = "10.250.0.1"
	podNet      = "10.250.0.0/30"
	podNftTable = "straitpod"
)

// newPod creates the namespace behind the client node's namespace. The
// caller removes it with close, also after an error.
func newPod(ctx context.Context, nodeNetns string) (*pod, error) {
	p := &pod{netns: nodeNetns + "-pod", node: nodeNetns}
	steps := [][]string{
		{"ip", "netns", "add", p.netns},
		{"ip", "-n", p.netns, "link", "set", "lo", "up"},
		{"ip", "link", "add", "pod0", "netns", p.node, "type", "veth", "peer", "name", "eth0", "netns", p.netns},
		{"ip", "-n", p.node, "addr", "add", podNodeAddr, "dev", "pod0"},
		{"ip", "-n", p.node, "link", "set", "pod0", "up"},
		{"ip", "-n", p.netns, "addr", "add", podAddr, "dev", "eth0"},
		{"ip", "-n", p.netns, "link", "set", "eth0", "up"},
		{"ip", "-n", p.netns, "route", "add", "default", "via", podGateway},
		{"ip", "netns", "exec", p.node, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "netns", "exec", p.node, "nft", "add", "table", "ip", podNftTable},
		{"ip", "netns", "exec", p.node, "nft", "add", "chain", "ip", podNftTable, "post", "{ type nat hook postrouting priority srcnat; }"},
		{"ip", "netns", "exec", p.node, "nft", "add", "rule", "ip", podNftTable, "post", "ip", "saddr", podNet, "masquerade"},
		{"ip", "netns", "exec", p.node, "sysctl", "-qw", fmt.Sprintf("net.netfilter.nf_conntrack_tcp_timeout_syn_sent=%d", int(probeTimeout/time.Second))},
	}
	for _, argv := range steps {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return p, fmt.Errorf("pod behind %s: %s: %w: %s", nodeNetns, strings.Join(argv, " "), err, out)
		}
	}
	return p, nil
}

// command runs argv in the pod.
func (p *pod) command(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", p.netns}, argv...)...)
}

// close removes the namespace (its veth goes with it) and the node's NAT
// table, if they exist.
func (p *pod) close() error {
	var errs []error
	_ = exec.Command("ip", "netns", "exec", p.node, "nft", "delete", "table", "ip", podNftTable).Run()
	if out, err := exec.Command("ip", "netns", "del", p.netns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		errs = append(errs, fmt.Errorf("remove %s: %w: %s", p.netns, err, out))
	}
	return errors.Join(errs...)
}
