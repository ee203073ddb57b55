package kube

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/strait-net/strait/load"
)

// peerPort is where a unit's peer listeners serve (`strait app peer`):
// unprivileged, as the image runs as a user, and apart from every
// workload's port (lab/run's 8080–8083).
const peerPort = 18084

// peerName is the server pod's peer container and both clusters' NodePort
// Services to the peer listeners.
const peerName = "peer"

// parsePeerLog reads `strait app peer`'s output: per request path, every
// source address it reported, in order of first appearance. Other lines
// (its "listening" line) are skipped, as is a line that does not parse.
func parsePeerLog(out []byte) map[string][]netip.Addr {
	seen := map[string][]netip.Addr{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "peer" {
			continue
		}
		path, err := strconv.Unquote(f[2])
		if err != nil {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		a = a.Unmap().WithZone("")
		if !slices.Contains(seen[path], a) {
			seen[path] = append(seen[path], a)
		}
	}
	return seen
}

// detectSources finds, once per run, each cluster's source address as the
// other sees it: the load pod asks the server pod's peer container and the
// server pod's peer container asks the load pod (both run `strait app
// peer`), by pod IP and by a NodePort with externalTrafficPolicy Local
// (which keeps the source address), the two ways the clusters' pods reach
// each other. Asking the other side, not the node's routes, is what works
// behind any NAT: the address is the one the packets carry on arrival.
func (u *unit) detectSources(ctx context.Context, loadPod *corev1.Pod) {
	u.b.mu.Lock()
	done := u.b.sourcesDone
	u.b.sourcesDone = true
	u.b.mu.Unlock()
	if done {
		return
	}
	for _, d := range []struct {
		from    *conn
		fromPod string
		fromCtr string
		to      *conn
		toPod   *corev1.Pod
		toCtr   string
	}{
		{u.client, loadName, loadName, u.server, u.serverPod, peerName},
		{u.server, u.serverPod.Name, peerName, u.client, loadPod, loadName},
	} {
		s := u.seenAs(ctx, d.from, d.fromPod, d.fromCtr, d.to, d.toPod, d.toCtr)
		if s.Error != "" {
			u.b.opts.Logger.Warn("source address not detected; emulation impairs toward the addresses the API and remote: give", "cluster", d.from.name, "err", s.Error)
		}
		u.b.mu.Lock()
		if info := u.b.meta.Clusters[d.from.name]; info != nil {
			info.Source = s
		}
		u.b.mu.Unlock()
	}
}

// seenAs asks toPod's peer listener, from fromPod, by every path there
// is, and reads the addresses it saw from its log.
func (u *unit) seenAs(ctx context.Context, from *conn, fromPod, fromCtr string, to *conn, toPod *corev1.Pod, toCtr string) *Source {
	type path struct{ what, target string }
	var paths []path
	if ip := toPod.Status.PodIP; ip != "" {
		t := net.JoinHostPort(ip, strconv.Itoa(peerPort))
		paths = append(paths, path{"pod IP " + t, t})
	}
	np, err := u.peerNodePort(ctx, to, toPod)
	if err != nil {
		return &Source{Error: err.Error()}
	}
	paths = append(paths, path{"NodePort " + np, np})
	var answered []int
	var failed []string
	for i, p := range paths {
		// The URL's path names the attempt, so the log says by which
		// path a source address came. One try by pod IP: within the
		// connect timeout the kernel resends a lost SYN, and where pod
		// IPs are not routed a second try only waits. Three by NodePort,
		// a second apart: the Service is new, and kube-proxy programs
		// its port some time after the API has it (on this host's
		// clusters the first try often gets no answer, the second does).
		tries := 1
		if strings.HasPrefix(p.what, "NodePort") {
			tries = 3
		}
		var last string
		for try := 0; try < tries; try++ {
			if try > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			last = u.askPeer(ctx, from, fromPod, fromCtr, "http://"+p.target+"/"+strconv.Itoa(i))
			if ctx.Err() != nil {
				return &Source{Error: ctx.Err().Error()}
			}
			if last == "" {
				answered = append(answered, i)
				if try > 0 {
					// Say so: a slow path is worth knowing about.
					paths[i].what += fmt.Sprintf(" (answered at try %d)", try+1)
				}
				break
			}
		}
		if last != "" {
			failed = append(failed, p.what+": "+last)
		}
	}
	if len(answered) == 0 {
		return &Source{Error: fmt.Sprintf("cluster %s's pod %s/%s reached no peer listener of cluster %s (%s)", from.name, u.ns, fromPod, to.name, strings.Join(failed, "; "))}
	}
	// The kubelet's log lags the container's output a little: poll until
	// every answered request is in it.
	var seen map[string][]netip.Addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := to.cs.CoreV1().Pods(u.ns).GetLogs(toPod.Name, &corev1.PodLogOptions{Container: toCtr}).DoRaw(ctx)
		seen = parsePeerLog(b)
		all := true
		for _, i := range answered {
			all = all && len(seen["/"+strconv.Itoa(i)]) > 0
		}
		if all {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return &Source{Error: fmt.Sprintf("cluster %s: pod %s/%s container %s answered but logged no source address (log: %v)", to.name, u.ns, toPod.Name, toCtr, err)}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	s := &Source{}
	var how []string
	for _, i := range answered {
		var as []string
		for _, addr := range seen["/"+strconv.Itoa(i)] {
			as = append(as, addr.String())
			if !slices.Contains(s.Addresses, addr.String()) {
				s.Addresses = append(s.Addresses, addr.String())
			}
		}
		how = append(how, fmt.Sprintf("%s saw %s", paths[i].what, strings.Join(as, ", ")))
	}
	s.How = fmt.Sprintf("seen by cluster %s's pod %s: %s", to.name, toPod.Name, strings.Join(how, "; "))
	if len(failed) > 0 {
		s.How += "; no answer by " + strings.Join(failed, "; ")
	}
	return s
}

// askPeer sends one request to url from a container and says why it got
// no answer ("" when it did).
func (u *unit) askPeer(ctx context.Context, from *conn, pod, container, url string) string {
	out, err := u.exec(ctx, from, pod, container, []string{"/strait", "load", "seq", "--url", url,
		"--requests", "1", "--connect-timeout", "2s", "--response-timeout", "5s", "--csv", "-", "--quiet"})
	if err != nil {
		return err.Error()
	}
	samples, err := load.ReadCSV(bytes.NewReader(out))
	switch {
	case err != nil:
		return err.Error()
	case len(samples) != 1:
		return fmt.Sprintf("%d requests in the CSV, want 1", len(samples))
	case !samples[0].OK():
		return fmt.Sprintf("status %d, error %q", samples[0].Status, samples[0].Err)
	}
	return ""
}

// peerNodePort exposes pod's peer listener on a NodePort of its node with
// externalTrafficPolicy Local: the node hands the connection to the pod
// without masquerading it, so the pod sees the source address.
func (u *unit) peerNodePort(ctx context.Context, c *conn, pod *corev1.Pod) (string, error) {
	node, err := c.cs.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("cluster %s: get node %s: %w", c.name, pod.Spec.NodeName, err)
	}
	addr := nodeAddress(node)
	if addr == "" {
		return "", fmt.Errorf("cluster %s: node %s has no address for a NodePort", c.name, node.Name)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: peerName, Labels: u.labels()},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeNodePort,
			Selector:              map[string]string{"app": pod.Labels["app"]},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "tcp", Port: peerPort, TargetPort: intstr.FromInt32(peerPort)}},
		},
	}
	got, err := c.cs.CoreV1().Services(u.ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("cluster %s: create Service %s/%s: %w", c.name, u.ns, peerName, err)
	}
	return net.JoinHostPort(addr, strconv.Itoa(int(got.Spec.Ports[0].NodePort))), nil
}

// nodeAddress is the address other clusters reach a node by: its
// InternalIP, else its ExternalIP.
func nodeAddress(node *corev1.Node) string {
	var addr string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || (addr == "" && a.Type == corev1.NodeExternalIP) {
			addr = a.Address
		}
	}
	return addr
}

// peerReady is a peer listener's readiness: a pod is ready, and asked,
// once its listener answers.
func peerReady() *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(peerPort)}}, PeriodSeconds: 1}
}
