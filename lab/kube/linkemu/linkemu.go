// Package linkemu emulates the links between Kubernetes clusters for the lab
// on real clusters: on every targeted node, a privileged hostNetwork
// DaemonSet pod (`strait lab node-emulate`, package nodeemu) impairs the
// node's egress toward the other clusters with the same emulation.Params the
// namespace lab gives each direction of a WAN link; docs/lab-clusters-emulation.md.
//
// Each Target is one cluster's side: its nodes' packets toward Remote are
// impaired on egress. A link between clusters a and b is emulated as the
// namespace lab does it, with p on each direction: Apply with a Target for a
// (Remote: b's prefixes) and one for b (Remote: a's). A round trip then
// crosses p twice.
package linkemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/kube/podwait"
)

// Target is one cluster's side: the nodes whose traffic toward Remote is
// impaired on egress.
type Target struct {
	Cluster string         // for errors and labels
	Config  *rest.Config   // how to reach the cluster's API server
	Nodes   []string       // nodes to emulate on; empty = every Linux node
	Remote  []netip.Prefix // destinations in the other cluster(s): node IPs, pod and service CIDRs
	// ResetPorts: once a node's emulation is in place, its TCP connections
	// toward Remote with a local or peer port among these are ended
	// (nodeemu.ResetConnections), so that long-lived ones (strait
	// gateways' sessions) start over on the emulated path.
	ResetPorts []uint16
}

// Image is the image the DaemonSet runs (README, "Kubernetes"; docs/k8s-nodes.md).
var Image = "ghcr.io/strait-net/strait:lab"

// Namespace holds the DaemonSets: it exists in every cluster, and its
// PodSecurity level is where clusters already run privileged node agents
// (kube-proxy, CNI), so the lab creates and deletes no namespace.
const Namespace = "kube-system"

// Right is one verb on one resource in Namespace (group "" is the core API).
type Right struct{ Verb, Group, Resource string }

// Rights are what Apply, Remove and Down do in Namespace: read it (its
// PodSecurity level), the DaemonSets, the listing of their pods and of
// their FailedCreate and scale-up events (podwait), and the agents' logs
// (Remove keeps them). A Resource with a slash is a subresource, as RBAC
// writes it. Besides these they list nodes. The lab's preflight checks
// them before any unit (docs/lab-clusters.md, "Preflight").
var Rights = []Right{
	{"get", "", "namespaces"},
	{"create", "apps", "daemonsets"},
	{"get", "apps", "daemonsets"},
	{"list", "apps", "daemonsets"},
	{"delete", "apps", "daemonsets"},
	{"list", "", "pods"},
	{"get", "", "pods/log"},
	{"list", "", "events"},
}

// PodSecurity is the PodSecurity level Namespace must admit: the agent's
// pod is privileged and on the host network.
const PodSecurity = "privileged"

// What names the package's objects in the preflight's errors.
const What = "the privileged hostNetwork DaemonSet pods of link emulation (strait-linkemu-*)"

// Labels on everything the package creates.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"
	LabelRun       = "strait.dev/lab-run"
	managedBy      = "strait-lab"
	component      = "linkemu"
	componentClean = "linkemu-clean"
	annotationRun  = "strait.dev/lab-run-name"
)

// ReadyTimeout bounds Apply's wait when ctx has no deadline: image pulls and
// pod starts on a loaded host take tens of seconds; a hang detector.
var ReadyTimeout = 4 * time.Minute

const readyFile = "/run/strait-linkemu/ready"

// Applied is an emulation in place; Remove takes it away.
type Applied struct {
	run   string
	sides []*side
}

type side struct {
	t     Target
	c     kubernetes.Interface
	ds    string
	nodes []string
}

// Apply starts the emulation p on every target and returns once every
// targeted node reports it in place. On error, what it created is removed
// again, and the error names the cluster, and the node and pod where one
// failed. A zero p applies nothing.
func Apply(ctx context.Context, run string, targets []Target, p emulation.Params) (*Applied, error) {
	a := &Applied{run: run}
	if run == "" {
		return nil, errors.New("linkemu: run must not be empty")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("linkemu: emulation: %w", err)
	}
	if p.IsZero() {
		return a, nil
	}
	spec, err := json.Marshal(p.Spec())
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, t := range targets {
		// One DaemonSet per run and cluster: a second target for the
		// same cluster would replace the first's.
		if seen[t.Cluster] {
			return nil, fmt.Errorf("linkemu: cluster %s: given twice (one Target per cluster; list all its remote prefixes in it)", t.Cluster)
		}
		seen[t.Cluster] = true
		s, err := prepare(ctx, t)
		if err != nil {
			return nil, err
		}
		s.ds = dsName(run, false)
		a.sides = append(a.sides, s)
	}
	fail := func(err error) (*Applied, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		return nil, errors.Join(err, a.Remove(cctx, nil))
	}
	for _, s := range a.sides {
		var remote []string
		for _, r := range s.t.Remote {
			remote = append(remote, r.String())
		}
		args := []string{"lab", "node-emulate", "--run", run, "--remote", strings.Join(remote, ","),
			"--emulation", string(spec), "--ready", readyFile}
		if len(s.t.ResetPorts) > 0 {
			var ports []string
			for _, port := range s.t.ResetPorts {
				ports = append(ports, strconv.Itoa(int(port)))
			}
			args = append(args, "--reset-ports", strings.Join(ports, ","))
		}
		if err := s.create(ctx, run, s.ds, component, args); err != nil {
			return fail(err)
		}
	}
	wctx, cancel := withDefaultTimeout(ctx, ReadyTimeout)
	defer cancel()
	for _, s := range a.sides {
		if err := s.waitReady(wctx); err != nil {
			return fail(err)
		}
	}
	return a, nil
}

// Remove deletes the DaemonSets and waits until their pods are gone: each
// pod removes its node's emulation when it gets SIGTERM, before it exits.
// With logs, each agent's whole output up to its exit is written there
// under a line naming cluster, node and pod: the userspace emulator logs
// its link counters (packets, drops, late deliveries) as it stops, and a
// pod's log goes with the pod, so only a reader that follows it from
// before the delete gets them (docs/lab-clusters-emulation.md, "Counters").
func (a *Applied) Remove(ctx context.Context, logs io.Writer) error {
	if a == nil {
		return nil
	}
	var errs []error
	for _, s := range a.sides {
		var followed []*agentLog
		if logs != nil {
			followed = s.follow(ctx)
		}
		errs = append(errs, s.delete(ctx, s.ds))
		for _, f := range followed {
			f.writeTo(logs)
		}
	}
	return errors.Join(errs...)
}

// agentLog is one agent pod's log, read from before its DaemonSet is
// deleted until its container exits.
type agentLog struct {
	cluster, node, pod string
	out                strings.Builder
	err                error
	done               chan struct{}
	stream             io.ReadCloser
}

// logPatience bounds the wait for an agent's log to end once its pod is
// gone: the stream ends when the container exits, which the delete has
// already waited for.
const logPatience = 10 * time.Second

// follow starts following the log of every agent pod of s.ds. A pod whose
// log cannot be opened is reported in its place, not as Remove's error:
// the emulation is removed all the same.
func (s *side) follow(ctx context.Context) []*agentLog {
	sel := labels.Set{"app.kubernetes.io/name": s.ds}.String()
	pods, err := s.c.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return []*agentLog{{cluster: s.t.Cluster, err: fmt.Errorf("list pods of DaemonSet %s/%s: %w", Namespace, s.ds, err)}}
	}
	var out []*agentLog
	for _, p := range pods.Items {
		l := &agentLog{cluster: s.t.Cluster, node: p.Spec.NodeName, pod: p.Name, done: make(chan struct{})}
		out = append(out, l)
		l.stream, l.err = s.c.CoreV1().Pods(Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "emulate", Follow: true}).Stream(ctx)
		if l.err != nil {
			close(l.done)
			continue
		}
		go func() {
			defer close(l.done)
			_, l.err = io.Copy(&l.out, l.stream)
		}()
	}
	return out
}

// writeTo waits for the log's end and writes it to w.
func (l *agentLog) writeTo(w io.Writer) {
	if l.stream != nil {
		select {
		case <-l.done:
		case <-time.After(logPatience):
			l.stream.Close() // ends the copy
			<-l.done
			l.err = fmt.Errorf("log still open %v after the pod was gone", logPatience)
		}
		l.stream.Close()
	}
	fmt.Fprintf(w, "# cluster %s, node %s, pod %s/%s\n", l.cluster, l.node, Namespace, l.pod)
	io.WriteString(w, l.out.String())
	if l.err != nil {
		fmt.Fprintf(w, "# log: %v\n", l.err)
	}
}

// Down removes every link emulation DaemonSet of run ("" = of every strait
// lab run) from the cluster cfg reaches, waits for their pods to finish,
// then runs a cleaning pod on every Linux node that removes what a killed
// agent of run left behind and checks that nothing is left, and removes it
// again. cluster names the cluster in errors.
func Down(ctx context.Context, cfg *rest.Config, run string) error {
	return DownCluster(ctx, "", cfg, run)
}

// DownCluster is Down with the cluster's name for errors.
func DownCluster(ctx context.Context, cluster string, cfg *rest.Config, run string) error {
	s, err := prepare(ctx, Target{Cluster: cluster, Config: cfg, Remote: []netip.Prefix{{}}})
	if err != nil {
		return err
	}
	sel := labels.Set{LabelManagedBy: managedBy, LabelComponent: component}
	if run != "" {
		sel[LabelRun] = runLabel(run)
	}
	list, err := s.c.AppsV1().DaemonSets(Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return s.errorf("list DaemonSets in %s: %w", Namespace, err)
	}
	var errs []error
	for _, ds := range list.Items {
		errs = append(errs, s.delete(ctx, ds.Name))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// The cleaning pass.
	clean := dsName(run, true)
	if err := s.create(ctx, run, clean, componentClean, []string{"lab", "node-emulate", "--clean", "--run", run, "--ready", readyFile}); err != nil {
		return err
	}
	wctx, cancel := withDefaultTimeout(ctx, ReadyTimeout)
	defer cancel()
	err = s.waitReady(wctx)
	return errors.Join(err, s.delete(context.WithoutCancel(ctx), clean))
}

// prepare checks what can be checked before anything is created: the API
// server answers, the nodes exist and run Linux, and the namespace admits
// privileged pods.
func prepare(ctx context.Context, t Target) (*side, error) {
	s := &side{t: t}
	if t.Config == nil {
		return nil, s.errorf("no client configuration")
	}
	if len(t.Remote) == 0 {
		return nil, s.errorf("no remote prefixes: nothing to impair")
	}
	c, err := kubernetes.NewForConfig(t.Config)
	if err != nil {
		return nil, s.errorf("client: %w", err)
	}
	s.c = c
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, s.errorf("list nodes (is the cluster reachable, may this user list nodes?): %w", err)
	}
	byName := map[string]corev1.Node{}
	for _, n := range nodes.Items {
		byName[n.Name] = n
	}
	if len(t.Nodes) == 0 {
		for _, n := range nodes.Items {
			if n.Labels[corev1.LabelOSStable] == "linux" {
				s.nodes = append(s.nodes, n.Name)
			}
		}
		if len(s.nodes) == 0 {
			return nil, s.errorf("no Linux node (label %s=linux): link emulation needs a Linux kernel", corev1.LabelOSStable)
		}
	}
	for _, name := range t.Nodes {
		n, ok := byName[name]
		switch {
		case !ok:
			return nil, s.errorf("node %s: not found", name)
		case n.Labels[corev1.LabelOSStable] != "linux":
			return nil, s.errorf("node %s: runs %q (label %s), not Linux: link emulation needs a Linux kernel", name, n.Labels[corev1.LabelOSStable], corev1.LabelOSStable)
		}
		s.nodes = append(s.nodes, name)
	}
	sort.Strings(s.nodes)
	ns, err := c.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
	if err != nil {
		return nil, s.errorf("namespace %s: %w", Namespace, err)
	}
	if lvl := ns.Labels["pod-security.kubernetes.io/enforce"]; lvl != "" && lvl != PodSecurity {
		return nil, s.errorf("namespace %s enforces PodSecurity %q, which refuses the privileged hostNetwork pod link emulation needs", Namespace, lvl)
	}
	return s, nil
}

func (s *side) errorf(format string, args ...any) error {
	name := s.t.Cluster
	if name == "" && s.t.Config != nil {
		name = s.t.Config.Host
	}
	return fmt.Errorf("cluster %s: "+format, append([]any{name}, args...)...)
}

// CPURequest is the agent's CPU request. Without one its pod is BestEffort,
// whose cgroup has the least CPU weight there is (cpu.shares 2), and the
// userspace emulator's reader and writer then lose the CPU to any busy
// pod with a request, such as a strait gateway (200m) encrypting the very
// stream the emulator delays: its queue overflowed and dropped 15–17 % of
// a bulk stream's packets (docs/lab-clusters.md, "The strait bulk stream").
// In the namespace lab the emulator runs at nice -10 beside the tools'
// processes; a request of one CPU gives it a weight over four times a
// gateway's. No limit: a CPU quota would throttle it in bursts. The
// cleaning pass emulates nothing and requests nothing.
const CPURequest = "1"

// create makes the DaemonSet name running strait with args on s's nodes. A
// DaemonSet of that name left by an interrupted run is replaced.
func (s *side) create(ctx context.Context, run, name, comp string, args []string) error {
	lbl := map[string]string{LabelManagedBy: managedBy, LabelComponent: comp, LabelRun: runLabel(run), "app.kubernetes.io/name": name}
	privileged := true
	root := int64(0)
	grace := int64(30)
	var resources corev1.ResourceRequirements
	if comp == component {
		// Not BestEffort: see CPURequest.
		resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(CPURequest)}
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: lbl, Annotations: map[string]string{annotationRun: run}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl, Annotations: map[string]string{annotationRun: run}},
				Spec: corev1.PodSpec{
					HostNetwork:                   true,
					DNSPolicy:                     corev1.DNSClusterFirstWithHostNet,
					TerminationGracePeriodSeconds: &grace,
					NodeSelector:                  map[string]string{corev1.LabelOSStable: "linux"},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: s.nodes}},
						}}},
					}},
					Containers: []corev1.Container{{
						Name:                     "emulate",
						Image:                    Image,
						ImagePullPolicy:          corev1.PullIfNotPresent,
						Args:                     args,
						SecurityContext:          &corev1.SecurityContext{Privileged: &privileged, RunAsUser: &root},
						Resources:                resources,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						VolumeMounts:             []corev1.VolumeMount{{Name: "state", MountPath: "/run/strait-linkemu"}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/strait", "lab", "node-emulate", "--probe", readyFile}}},
							PeriodSeconds:    1,
							FailureThreshold: 1,
							TimeoutSeconds:   5,
						},
					}},
					Volumes: []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
				},
			},
		},
	}
	_, err := s.c.AppsV1().DaemonSets(Namespace).Create(ctx, ds, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if err := s.delete(ctx, name); err != nil {
			return err
		}
		_, err = s.c.AppsV1().DaemonSets(Namespace).Create(ctx, ds, metav1.CreateOptions{})
	}
	if err != nil {
		return s.errorf("create DaemonSet %s/%s: %w", Namespace, name, err)
	}
	s.ds = name
	return nil
}

// waitReady polls until every node of s has a ready pod of s.ds, and fails
// early, naming node and pod, on what will not heal by waiting
// (podwait.Watcher: no free CPU for the agent's request, an image that
// cannot be pulled, an agent that exits).
func (s *side) waitReady(ctx context.Context) error {
	sel := labels.Set{"app.kubernetes.io/name": s.ds}.String()
	w := &podwait.Watcher{ScaleUp: podwait.ScaleUpEvents(s.c)}
	var last error
	for {
		pods, err := s.c.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err == nil {
			last, err = s.check(ctx, w, pods.Items)
			if err != nil {
				return err
			}
			if last == nil {
				return nil
			}
		} else {
			last = s.errorf("list pods of DaemonSet %s/%s: %w", Namespace, s.ds, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting: %w)", last, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// check returns pending (nil once every node is ready) and a fatal error.
// A pod is matched to its node before the scheduler places it (podwait.Node):
// one that no node has room for is the one to report.
func (s *side) check(ctx context.Context, w *podwait.Watcher, pods []corev1.Pod) (pending, fatal error) {
	byNode := map[string]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		if n := podwait.Node(p); p.DeletionTimestamp == nil && n != "" {
			byNode[n] = p
		}
	}
	for _, node := range s.nodes {
		p := byNode[node]
		if p == nil {
			if msg := s.createFailure(ctx); msg != "" {
				return nil, s.errorf("node %s: DaemonSet %s/%s cannot create its pod: %s", node, Namespace, s.ds, msg)
			}
			pending = s.errorf("node %s: no pod of DaemonSet %s/%s yet", node, Namespace, s.ds)
			continue
		}
		st := w.Check(ctx, p)
		if st.Ready {
			continue
		}
		where := fmt.Sprintf("node %s: DaemonSet %s/%s: pod %s", node, Namespace, s.ds, p.Name)
		if st.Stuck {
			return nil, s.errorf("%s: %s%s", where, st.Why, s.requestHint(st.Why))
		}
		pending = s.errorf("%s: not ready (%s)", where, st.Why)
	}
	return pending, nil
}

// requestHint says what the agent asks of a node the scheduler found no
// room on, so that the error says what to free.
func (s *side) requestHint(why string) string {
	if !strings.Contains(why, "Insufficient cpu") {
		return ""
	}
	return fmt.Sprintf(" (the link emulation agent requests %s CPU, CPURequest in docs/lab-clusters-emulation.md)", CPURequest)
}

// createFailure returns the message of a FailedCreate event of s.ds (PodSecurity
// admission, quota, a webhook refusing the pod), or "".
func (s *side) createFailure(ctx context.Context) string {
	ev, err := s.c.CoreV1().Events(Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=DaemonSet,involvedObject.name=" + s.ds + ",reason=FailedCreate"})
	if err != nil || len(ev.Items) == 0 {
		return ""
	}
	return ev.Items[len(ev.Items)-1].Message
}

// delete removes DaemonSet name and waits until it and its pods are gone.
func (s *side) delete(ctx context.Context, name string) error {
	fg := metav1.DeletePropagationForeground
	err := s.c.AppsV1().DaemonSets(Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
	if err != nil && !apierrors.IsNotFound(err) {
		return s.errorf("delete DaemonSet %s/%s: %w", Namespace, name, err)
	}
	dctx, cancel := withDefaultTimeout(ctx, 2*time.Minute)
	defer cancel()
	sel := labels.Set{"app.kubernetes.io/name": name}.String()
	for {
		pods, perr := s.c.CoreV1().Pods(Namespace).List(dctx, metav1.ListOptions{LabelSelector: sel})
		_, derr := s.c.AppsV1().DaemonSets(Namespace).Get(dctx, name, metav1.GetOptions{})
		if perr == nil && len(pods.Items) == 0 && apierrors.IsNotFound(derr) {
			return nil
		}
		select {
		case <-dctx.Done():
			n := -1
			if pods != nil {
				n = len(pods.Items)
			}
			return s.errorf("DaemonSet %s/%s: still %d pods or the DaemonSet itself after deletion: %w", Namespace, name, n, dctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// dsName is the DaemonSet's name: a hash of the run (a run's name need not be
// a valid object name), the one nodeemu names its devices with.
func dsName(run string, clean bool) string {
	h := fnv.New32a()
	h.Write([]byte(run))
	if clean {
		if run == "" {
			return "strait-linkemu-clean-all"
		}
		return fmt.Sprintf("strait-linkemu-clean-%08x", h.Sum32())
	}
	return fmt.Sprintf("strait-linkemu-%08x", h.Sum32())
}

var labelValue = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// runLabel is run as a label value, or its hash where run is not one.
func runLabel(run string) string {
	if labelValue.MatchString(run) {
		return run
	}
	h := fnv.New32a()
	h.Write([]byte(run))
	return fmt.Sprintf("h%08x", h.Sum32())
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
