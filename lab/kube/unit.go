package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/strait-net/strait/lab/kube/podwait"
	"github.com/strait-net/strait/lab/run"
	"github.com/strait-net/strait/load"
)

// Object names within a unit's namespace.
const (
	serverName = "server" // the workloads' Deployment (one pod, a container per workload)
	loadName   = "load"   // the load generator's pod
)

var (
	exportGVR = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "serviceexports"}
	policyGVR = schema.GroupVersionResource{Group: "strait.dev", Version: "v1alpha1", Resource: "accesspolicies"}
)

// unit is one unit's objects in the server's and the client's cluster.
type unit struct {
	b              *Backend
	id, ns         string
	server, client *conn
	services       []run.BackendService
	applied        Applied
	emulatorLog    string // run.BackendUnitSpec.EmulatorLog
	serverPod      *corev1.Pod
	// detect: this unit finds the clusters' source addresses
	// (detectSources): the server pod and the load pod run peer
	// listeners.
	detect bool
}

// Unit creates the unit's namespace in both clusters (MCS namespace
// sameness), the workloads in the server's and the load generator's pod in
// the client's, and waits until they are ready (run.Backend).
func (b *Backend) Unit(ctx context.Context, spec run.BackendUnitSpec) (_ run.BackendUnit, err error) {
	u := &unit{b: b, id: spec.ID, ns: unitNamespacePrefix + spec.ID, server: b.conns[b.server], client: b.conns[b.client],
		services: spec.Services, emulatorLog: spec.EmulatorLog}
	if u.server == nil || u.client == nil {
		return nil, errors.New("kube: Unit before Check")
	}
	// An interrupted run may have left this unit's namespace and
	// emulation (resume). Only an impaired unit can have left emulation
	// (a unit's scenario does not change on resume), and cleaning runs a
	// pod on every node: skip it for the others.
	sc := spec.Scenario
	impaired := !sc.LAN.IsZero() || !sc.WAN.IsZero()
	if impaired {
		b.mu.Lock()
		u.detect = !b.sourcesDone
		b.mu.Unlock()
	}
	if e := b.opts.Emulator; e != nil && impaired {
		for _, c := range []*conn{u.server, u.client} {
			if err := e.Down(ctx, c.cfg, u.id); err != nil {
				return nil, fmt.Errorf("cluster %s: remove a previous run's emulation of unit %s: %w", c.name, u.id, err)
			}
		}
	}
	if err := u.removeAll(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, u.Close(context.WithoutCancel(ctx)))
		}
	}()
	for _, c := range []*conn{u.server, u.client} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: u.ns, Labels: u.labels()}}
		if _, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("cluster %s: create namespace %s: %w", c.name, u.ns, err)
		}
	}
	if err := u.createServer(ctx); err != nil {
		return nil, err
	}
	if err := u.createLoad(ctx); err != nil {
		return nil, err
	}
	if u.serverPod, err = u.waitReady(ctx, u.server, "Deployment", serverName); err != nil {
		return nil, err
	}
	loadPod, err := u.waitReady(ctx, u.client, "Pod", loadName)
	if err != nil {
		return nil, err
	}
	if impaired {
		if u.detect {
			u.detectSources(ctx, loadPod)
		}
		if err := u.emulate(ctx, spec); err != nil {
			return nil, err
		}
	}
	return u, nil
}

func (u *unit) labels() map[string]string {
	return map[string]string{ManagedByLabel: ManagedBy, UnitLabel: u.id}
}

// emulate applies the scenario to the links between the two clusters'
// nodes: its client–server path composed into one impairment per
// direction (scenario.Scenario.Path), on each cluster's egress toward the
// other, and records it in the run's metadata.
func (u *unit) emulate(ctx context.Context, spec run.BackendUnitSpec) error {
	p := spec.Scenario.Path()
	var targets []EmuTarget
	applied := AppliedEmulation{Scenario: spec.Scenario.Name, Params: p.String(), Remote: map[string][]string{}}
	for _, c := range []*conn{u.server, u.client} {
		other := u.server
		if c == u.server {
			other = u.client
		}
		remote := u.b.remote(other.name)
		targets = append(targets, EmuTarget{Cluster: c.name, Config: c.cfg, Remote: remote, ResetPorts: u.b.resetPorts})
		for _, r := range remote {
			applied.Remote[c.name] = append(applied.Remote[c.name], r.String())
		}
	}
	a, err := u.b.opts.Emulator.Apply(ctx, u.id, targets, p)
	if err != nil {
		return fmt.Errorf("emulation %s (%s per direction): %w", spec.Scenario.Name, p, err)
	}
	u.applied = a
	u.b.mu.Lock()
	u.b.meta.Emulation[u.id] = applied
	u.b.mu.Unlock()
	return nil
}

// remote lists where traffic toward cluster name goes, as its preflight
// saw it: every node's addresses and pod CIDRs, the source address the
// other cluster saw its pods' traffic come from (detectSources: e.g. the
// address its nodes masquerade pod traffic to), and what the clusters file
// lists under the cluster's remote. (Service CIDRs are not in the API;
// traffic to another cluster's Service leaves as traffic to its nodes or
// pods after DNAT.)
func (b *Backend) remote(name string) []netip.Prefix {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []netip.Prefix
	out = append(out, b.opts.Clusters.Clusters[name].remote...)
	info := b.meta.Clusters[name]
	if info == nil {
		return out
	}
	if info.Source != nil {
		for _, a := range info.Source.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	for _, n := range info.Nodes {
		for _, a := range strings.Split(n.Addresses, ",") {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
		for _, c := range strings.Split(n.PodCIDRs, ",") {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	return out
}

// createServer is the workloads: one pod with a container per workload,
// as the namespace lab runs them all on one server node, and a Service
// per workload.
func (u *unit) createServer(ctx context.Context) error {
	var containers []corev1.Container
	for _, s := range u.services {
		c := corev1.Container{
			Name: s.Name, Image: u.b.opts.Clusters.Image,
			Args:  append(append([]string{}, s.Args...), "--listen", net.JoinHostPort("0.0.0.0", strconv.Itoa(s.Port))),
			Ports: []corev1.ContainerPort{{Name: portName(s.Name), ContainerPort: int32(s.Port)}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(s.Port))}},
				PeriodSeconds: 1},
		}
		if s.Stream {
			// A probe's connection sends no handshake: the stream
			// server would log a failed test every second for the
			// unit's life. It listens within milliseconds of its
			// start, and the runner checks it through every tool
			// before measuring (lab/run's backendStreamHealth).
			c.ReadinessProbe = nil
		}
		containers = append(containers, c)
	}
	if u.detect {
		containers = append(containers, corev1.Container{
			Name: peerName, Image: u.b.opts.Clusters.Image,
			Args:           []string{"app", "peer", "--listen", net.JoinHostPort("0.0.0.0", strconv.Itoa(peerPort))},
			ReadinessProbe: peerReady(),
		})
	}
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: serverName, Labels: u.labels()},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": serverName}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: merge(u.labels(), map[string]string{"app": serverName})},
				Spec:       podSpec(containers),
			},
		},
	}
	if _, err := u.server.cs.AppsV1().Deployments(u.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cluster %s: create Deployment %s/%s: %w", u.server.name, u.ns, serverName, err)
	}
	for _, s := range u.services {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: u.labels()},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": serverName},
				Ports:    []corev1.ServicePort{{Name: "tcp", Port: int32(s.Port), TargetPort: intstr.FromString(portName(s.Name))}},
			},
		}
		if _, err := u.server.cs.CoreV1().Services(u.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("cluster %s: create Service %s/%s: %w", u.server.name, u.ns, s.Name, err)
		}
	}
	return nil
}

// portName is a container port's name (at most 15 characters).
func portName(workload string) string {
	if len(workload) > 15 {
		return workload[:15]
	}
	return workload
}

// createLoad is the load generator's pod: strait's image idling in `strait
// app hello` on loopback (the image has nothing but strait), so that every
// cell's `strait load seq` is an exec into a warm pod rather than a pod
// start, and its CSV comes back on the exec's standard output.
func (u *unit) createLoad(ctx context.Context) error {
	// An unprivileged port: the image runs as a user (65532).
	args := []string{"app", "hello", "--listen", "127.0.0.1:18083"}
	var probe *corev1.Probe
	if u.detect {
		// The server's cluster asks it which address its pods have here.
		args = []string{"app", "peer", "--listen", net.JoinHostPort("0.0.0.0", strconv.Itoa(peerPort))}
		probe = peerReady()
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: loadName, Labels: merge(u.labels(), map[string]string{"app": loadName})},
		Spec: podSpec([]corev1.Container{{
			Name: loadName, Image: u.b.opts.Clusters.Image, Args: args, ReadinessProbe: probe,
		}}),
	}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := u.client.cs.CoreV1().Pods(u.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cluster %s: create Pod %s/%s: %w", u.client.name, u.ns, loadName, err)
	}
	return nil
}

func podSpec(containers []corev1.Container) corev1.PodSpec {
	var grace int64 = 1
	return corev1.PodSpec{
		Containers:                    containers,
		NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"},
		TerminationGracePeriodSeconds: &grace,
		EnableServiceLinks:            new(bool),
	}
}

func merge(a, b map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

// waitReady polls until the pod of object (kind "Deployment" or "Pod",
// its pods labelled app=name) is ready. When it cannot become ready
// (podwait.Watcher: unschedulable, its image cannot be pulled, a container
// fails), or the Deployment cannot create it, the error comes at once; the
// deadline is a last resort. Either names the cluster, namespace, object,
// pod and node and says what Kubernetes says.
func (u *unit) waitReady(parent context.Context, c *conn, kind, name string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(parent, u.b.opts.Ready)
	defer cancel()
	w := &podwait.Watcher{ScaleUp: podwait.ScaleUpEvents(c.cs)}
	where := fmt.Sprintf("cluster %s: namespace %s: %s %s", c.name, u.ns, kind, name)
	var last string
	for {
		pods, err := c.cs.CoreV1().Pods(u.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("cluster %s: namespace %s is gone", c.name, u.ns)
		case err != nil && ctx.Err() == nil:
			last = err.Error()
		case err == nil:
			last = "no pod yet"
			if ns, gerr := c.cs.CoreV1().Namespaces().Get(ctx, u.ns, metav1.GetOptions{}); apierrors.IsNotFound(gerr) || (gerr == nil && ns.DeletionTimestamp != nil) {
				return nil, fmt.Errorf("cluster %s: namespace %s was deleted while its pods started", c.name, u.ns)
			}
			if len(pods.Items) == 0 && kind == "Deployment" {
				if msg := replicaFailure(ctx, c, u.ns, name); msg != "" {
					return nil, fmt.Errorf("%s: cannot create its pod: %s", where, msg)
				}
			}
			for i := range pods.Items {
				p := &pods.Items[i]
				st := w.Check(ctx, p)
				if st.Ready {
					return p, nil
				}
				pod := "pod " + p.Name
				if p.Spec.NodeName != "" {
					pod += " on node " + p.Spec.NodeName
				}
				last = pod + ": " + st.Why
				if st.Stuck {
					return nil, fmt.Errorf("%s: %s%s%s", where, last, taintHint(ctx, c, st.Why), logTail(ctx, c, p))
				}
			}
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return nil, parent.Err()
			}
			return nil, fmt.Errorf("%s: not ready after %v: %s", where, u.b.opts.Ready, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// taintHint lists the nodes' taints when the scheduler refused a pod for
// them: its message counts the nodes but does not name the taints, and the
// unit's pods tolerate none.
func taintHint(ctx context.Context, c *conn, why string) string {
	if !strings.Contains(why, "untolerated taint") {
		return ""
	}
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var t []string
	for _, n := range nodes.Items {
		for _, taint := range n.Spec.Taints {
			if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
				t = append(t, "node "+n.Name+" "+taint.ToString())
			}
		}
	}
	if len(t) == 0 {
		return ""
	}
	return " (taints: " + strings.Join(t, ", ") + ")"
}

// replicaFailure is the message of Deployment name's ReplicaFailure
// condition (its ReplicaSet cannot create a pod: a quota, an admission
// webhook or PodSecurity refusing it), or "".
func replicaFailure(ctx context.Context, c *conn, ns, name string) string {
	d, err := c.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentReplicaFailure && cond.Status == corev1.ConditionTrue {
			return cond.Reason + ": " + cond.Message
		}
	}
	return ""
}

// logTail is the last lines each container of a failed pod logged, for
// the error that reports it.
func logTail(ctx context.Context, c *conn, p *corev1.Pod) string {
	var s string
	lines := int64(5)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil && cs.LastTerminationState.Terminated == nil {
			continue
		}
		b, err := c.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, TailLines: &lines, Previous: cs.State.Terminated == nil}).DoRaw(ctx)
		if err == nil && len(bytes.TrimSpace(b)) > 0 {
			s += fmt.Sprintf("; container %s logged: %s", cs.Name, strings.Join(strings.Fields(string(bytes.TrimSpace(b))), " "))
		}
	}
	return s
}

// Load runs `strait load ARGS` in the load generator's pod (run.BackendUnit).
func (u *unit) Load(ctx context.Context, args []string) ([]byte, error) {
	return u.exec(ctx, u.client, loadName, loadName, append([]string{"/strait", "load"}, args...))
}

// exec runs argv in a pod's container and returns its standard output;
// an error carries its standard error.
func (u *unit) exec(ctx context.Context, c *conn, pod, container string, argv []string) ([]byte, error) {
	req := c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(u.ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	// Exec streams for as long as the command runs: no client timeout.
	cfg := *c.cfg
	cfg.Timeout = 0
	ex, err := remotecommand.NewSPDYExecutor(&cfg, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("cluster %s: exec in pod %s/%s: %w", c.name, u.ns, pod, err)
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.Bytes(), fmt.Errorf("cluster %s: pod %s/%s: %s: %w: %s", c.name, u.ns, pod, strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Tool makes the workloads reachable from the load generator through one
// tool (run.BackendUnit).
func (u *unit) Tool(ctx context.Context, name string) (map[string]string, string, error) {
	switch name {
	case "direct":
		return u.direct(ctx)
	case "strait":
		return u.strait(ctx)
	case run.InstalledTool:
		return u.installed(ctx)
	}
	return nil, "", fmt.Errorf("tool %s: not available on clusters", name)
}

// direct reaches the server pod by its IP where the clusters route pod
// networks to each other, else through a NodePort Service on the server
// pod's node; the metadata says which.
func (u *unit) direct(ctx context.Context) (map[string]string, string, error) {
	mode := u.b.opts.Clusters.Direct
	pod := func() map[string]string {
		t := map[string]string{}
		for _, s := range u.services {
			t[s.Name] = net.JoinHostPort(u.serverPod.Status.PodIP, strconv.Itoa(s.Port))
		}
		return t
	}
	// The probe is an HTTP request: to a workload, not the stream server.
	probe := ""
	for _, s := range u.services {
		if !s.Stream && probe == "" {
			probe = s.Name
		}
	}
	if mode == DirectAuto && probe != "" {
		mode = DirectNodePort
		target := pod()[probe]
		// A few tries: one lost SYN must not send a routed pair through
		// NodePorts.
		for i := 0; i < 3 && mode != DirectPod; i++ {
			out, err := u.Load(ctx, []string{"seq", "--url", "http://" + target + "/", "--requests", "1", "--connect-timeout", "2s", "--response-timeout", "5s", "--csv", "-", "--quiet"})
			if err == nil {
				if samples, err := load.ReadCSV(bytes.NewReader(out)); err == nil && len(samples) == 1 && samples[0].OK() {
					mode = DirectPod
				}
			}
			if ctx.Err() != nil {
				return nil, "", ctx.Err()
			}
		}
	}
	u.b.setDirect(u.id, mode)
	if mode == DirectPod {
		return pod(), "pod IP", nil
	}
	return u.nodePort(ctx)
}

// nodePort exposes every workload on a NodePort of the server pod's node.
func (u *unit) nodePort(ctx context.Context) (map[string]string, string, error) {
	node, err := u.server.cs.CoreV1().Nodes().Get(ctx, u.serverPod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("cluster %s: get node %s: %w", u.server.name, u.serverPod.Spec.NodeName, err)
	}
	addr := nodeAddress(node)
	if addr == "" {
		return nil, "", fmt.Errorf("cluster %s: node %s has no address for a NodePort", u.server.name, node.Name)
	}
	t := map[string]string{}
	for _, s := range u.services {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: s.Name + "-nodeport", Labels: u.labels()},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeNodePort,
				Selector: map[string]string{"app": serverName},
				// Local: the node that carries the server pod answers
				// itself, no second hop inside the server's cluster.
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
				Ports:                 []corev1.ServicePort{{Name: "tcp", Port: int32(s.Port), TargetPort: intstr.FromString(portName(s.Name))}},
			},
		}
		got, err := u.server.cs.CoreV1().Services(u.ns).Create(ctx, svc, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = u.server.cs.CoreV1().Services(u.ns).Get(ctx, svc.Name, metav1.GetOptions{})
		}
		if err != nil {
			return nil, "", fmt.Errorf("cluster %s: create Service %s/%s: %w", u.server.name, u.ns, svc.Name, err)
		}
		t[s.Name] = net.JoinHostPort(addr, strconv.Itoa(int(got.Spec.Ports[0].NodePort)))
	}
	return t, "NodePort on " + node.Name, nil
}

// strait exports every workload (MCS ServiceExport) through the strait
// the user installed from deploy/, allows the unit's namespace with an
// AccessPolicy of its own (strait denies by default), and dials the
// clusterset.local names.
func (u *unit) strait(ctx context.Context) (map[string]string, string, error) {
	if err := u.export(ctx); err != nil {
		return nil, "", err
	}
	for _, c := range []*conn{u.server, u.client} {
		p := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "strait.dev/v1alpha1", "kind": "AccessPolicy",
			"metadata": map[string]any{"name": u.ns, "labels": toAny(u.labels())},
			"spec":     map[string]any{"priority": int64(100), "action": "allow", "to": map[string]any{"namespaces": []any{u.ns}}},
		}}
		if _, err := c.dyn.Resource(policyGVR).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, "", fmt.Errorf("cluster %s: create AccessPolicy %s: %w", c.name, u.ns, err)
		}
	}
	version := "unknown"
	if d, err := u.server.cs.AppsV1().Deployments("strait-system").Get(ctx, "strait-gateway", metav1.GetOptions{}); err == nil && len(d.Spec.Template.Spec.Containers) > 0 {
		version = d.Spec.Template.Spec.Containers[0].Image
	}
	// A fully qualified name (the trailing dot): a pod's resolv.conf has
	// ndots:5, so without it every new connection would first try the
	// cluster.local search domains, three failed lookups that are the
	// client's configuration, not strait.
	return u.names("{service}.{namespace}.svc.clusterset.local."), version, nil
}

// installed dials the names the user's interconnect gives the workloads.
func (u *unit) installed(ctx context.Context) (map[string]string, string, error) {
	if u.b.opts.Clusters.Export {
		if err := u.export(ctx); err != nil {
			return nil, "", err
		}
	}
	return u.names(u.b.opts.Clusters.Installed), "installed: " + u.b.opts.Clusters.Installed, nil
}

func (u *unit) names(template string) map[string]string {
	t := map[string]string{}
	for _, s := range u.services {
		host := strings.NewReplacer("{service}", s.Name, "{namespace}", u.ns).Replace(template)
		t[s.Name] = net.JoinHostPort(host, strconv.Itoa(s.Port))
	}
	return t
}

func (u *unit) export(ctx context.Context) error {
	for _, s := range u.services {
		e := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
			"metadata": map[string]any{"name": s.Name, "namespace": u.ns, "labels": toAny(u.labels())},
		}}
		if _, err := u.server.dyn.Resource(exportGVR).Namespace(u.ns).Create(ctx, e, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("cluster %s: create ServiceExport %s/%s: %w", u.server.name, u.ns, s.Name, err)
		}
	}
	return nil
}

func toAny(m map[string]string) map[string]any {
	a := map[string]any{}
	for k, v := range m {
		a[k] = v
	}
	return a
}

// Close removes the unit's emulation, keeping its agents' logs in
// u.emulatorLog, then the namespaces and policies, and waits until they
// are gone (run.BackendUnit).
func (u *unit) Close(ctx context.Context) error {
	var errs []error
	if u.applied != nil {
		if err := u.removeEmulation(ctx); err != nil {
			errs = append(errs, fmt.Errorf("emulation: %w", err))
		}
		u.applied = nil
	}
	return errors.Join(append(errs, u.removeAll(ctx))...)
}

// removeEmulation removes the unit's emulation and writes its agents' logs
// to u.emulatorLog. A log that cannot be written does not keep the
// emulation in place.
func (u *unit) removeEmulation(ctx context.Context) error {
	if u.emulatorLog == "" {
		return u.applied.Remove(ctx, nil)
	}
	f, err := os.Create(u.emulatorLog)
	if err != nil {
		return errors.Join(err, u.applied.Remove(ctx, nil))
	}
	return errors.Join(u.applied.Remove(ctx, f), f.Close())
}

// removeAll deletes the unit's objects in both clusters and waits until
// the namespaces are gone.
func (u *unit) removeAll(ctx context.Context) error {
	var errs []error
	for _, c := range []*conn{u.server, u.client} {
		if err := removeRun(ctx, c, UnitLabel+"="+u.id, u.b.opts.Ready); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeRun deletes the namespaces and AccessPolicies matching selector in
// one cluster and waits, up to patience, until the namespaces are gone.
func removeRun(ctx context.Context, c *conn, selector string, patience time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	// Forbidden: the user may not touch AccessPolicies, so no unit made
	// one (preflight asks for both verbs before the strait tool runs).
	if err := c.dyn.Resource(policyGVR).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector}); err != nil &&
		!apierrors.IsNotFound(err) && !meta404(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("cluster %s: delete AccessPolicies %s: %w", c.name, selector, err)
	}
	for {
		nss, err := c.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return fmt.Errorf("cluster %s: list namespaces %s: %w", c.name, selector, err)
		}
		if len(nss.Items) == 0 {
			return nil
		}
		var left []string
		for _, ns := range nss.Items {
			left = append(left, ns.Name)
			if ns.DeletionTimestamp == nil {
				bg := metav1.DeletePropagationBackground
				if err := c.cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("cluster %s: delete namespace %s: %w", c.name, ns.Name, err)
				}
			}
		}
		sort.Strings(left)
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %s: namespaces %s still deleting after %v", c.name, strings.Join(left, ", "), patience)
		case <-time.After(time.Second):
		}
	}
}

// meta404 is whether err says the resource type does not exist (a
// cluster without strait's CRDs has no AccessPolicies to delete).
func meta404(err error) bool {
	var se apierrors.APIStatus
	return errors.As(err, &se) && se.Status().Code == 404
}
