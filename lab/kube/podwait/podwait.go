// Package podwait tells a pod that will become ready by waiting from one
// that will not: the lab on clusters waits for its workloads' pods and its
// link emulation agents, and a pod that cannot be scheduled, whose image
// cannot be pulled or whose container keeps failing should fail the run at
// once with what Kubernetes says, not at the wait's deadline
// (docs/lab-clusters.md, "A unit").
package podwait

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// UnschedulableGrace is how long a pod may stay unschedulable before it
// counts as stuck. The scheduler retries a pod when the cluster changes, so
// a pod refused while another one's resources are still being released
// (a unit's namespace deleted just before) is scheduled seconds later; one
// refused for this long is waiting for someone to free a node.
var UnschedulableGrace = 20 * time.Second

// Status is a pod's state as a waiter sees it.
type Status struct {
	Ready bool
	// Why says what its phase, conditions and containers say, for an
	// error or a progress line; empty when Ready.
	Why string
	// Stuck: the pod will not become ready without someone changing
	// something (its image, the nodes, its command).
	Stuck bool
}

// Watcher follows the pods of one wait and says when one is stuck. The zero
// value is ready to use.
type Watcher struct {
	// Grace overrides UnschedulableGrace when positive.
	Grace time.Duration
	// ScaleUp reports whether a cluster autoscaler is adding a node for
	// the pod (its TriggeredScaleUp event): such a pod is unschedulable
	// only until that node joins, and is waited for until the deadline.
	// Nil: never.
	ScaleUp func(ctx context.Context, p *corev1.Pod) bool
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	since map[types.UID]time.Time
}

// Check returns p's status. Image pull failures, a container that cannot be
// created, one that exited with an error or is in CrashLoopBackOff (with
// its last termination message), and a failed pod are stuck at once; an
// unschedulable pod (the scheduler's reason) once it has been so for the
// grace, counted from the first Check that saw it so.
func (w *Watcher) Check(ctx context.Context, p *corev1.Pod) Status {
	if ready(p) {
		return Status{Ready: true}
	}
	if p.DeletionTimestamp != nil {
		// A pod on its way out (a Deployment's replaced one, killed with
		// exit 137 or 143) says nothing of the pods that replace it.
		return Status{Why: "being deleted"}
	}
	var why []string
	stuck := false
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		why = append(why, strings.TrimSpace("phase "+string(p.Status.Phase)+" "+p.Status.Message))
		stuck = true
	}
	for _, cs := range p.Status.ContainerStatuses {
		s, fatal := container(cs)
		if s != "" {
			why = append(why, s)
		}
		stuck = stuck || fatal
	}
	if msg, ok := unschedulable(p); ok {
		now := w.now()
		if w.since == nil {
			w.since = map[types.UID]time.Time{}
		}
		first, seen := w.since[p.UID]
		if !seen {
			first = now
			w.since[p.UID] = now
		}
		waited := now.Sub(first)
		switch {
		case waited < w.grace():
			why = append(why, "unschedulable: "+msg)
		case w.ScaleUp != nil && w.ScaleUp(ctx, p):
			why = append(why, "unschedulable, a node is being added (TriggeredScaleUp): "+msg)
		default:
			why = append(why, fmt.Sprintf("unschedulable for %v: %s", waited.Round(time.Second), msg))
			stuck = true
		}
	} else {
		delete(w.since, p.UID)
	}
	if len(why) == 0 {
		return Status{Why: "phase " + string(p.Status.Phase)}
	}
	return Status{Why: strings.Join(why, "; "), Stuck: stuck}
}

func (w *Watcher) grace() time.Duration {
	if w.Grace > 0 {
		return w.Grace
	}
	return UnschedulableGrace
}

func (w *Watcher) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// container describes one container that is not running well, and whether
// that is final.
func container(cs corev1.ContainerStatus) (string, bool) {
	switch {
	case cs.State.Waiting != nil:
		w := cs.State.Waiting
		s := strings.TrimSpace(fmt.Sprintf("container %s: %s %s", cs.Name, w.Reason, w.Message))
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			if !strings.Contains(w.Message, cs.Image) {
				s += " (image " + cs.Image + ")"
			}
			return s, true
		case "CrashLoopBackOff":
			return s + lastExit(cs), true
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			return s, true
		}
		return s, false
	case cs.State.Terminated != nil:
		t := cs.State.Terminated
		return strings.TrimSpace(fmt.Sprintf("container %s: terminated (%s, exit %d) %s", cs.Name, t.Reason, t.ExitCode, strings.TrimSpace(t.Message))), t.ExitCode != 0
	}
	return "", false
}

// lastExit is a restarting container's last exit and its termination
// message (the agent's error: TerminationMessageFallbackToLogsOnError).
func lastExit(cs corev1.ContainerStatus) string {
	t := cs.LastTerminationState.Terminated
	if t == nil {
		return ""
	}
	return strings.TrimRight(fmt.Sprintf(": last exit %d %s", t.ExitCode, strings.TrimSpace(t.Message)), " ")
}

// unschedulable returns the scheduler's message when it has refused p.
func unschedulable(p *corev1.Pod) (string, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Node is the node p runs on or, for a DaemonSet's pod the scheduler has
// not placed yet, the node its affinity pins it to (the DaemonSet
// controller gives each pod a required metadata.name term); "" otherwise.
func Node(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// ScaleUpEvents is a Watcher's ScaleUp that looks for the cluster
// autoscaler's TriggeredScaleUp event on the pod.
func ScaleUpEvents(c kubernetes.Interface) func(context.Context, *corev1.Pod) bool {
	return func(ctx context.Context, p *corev1.Pod) bool {
		ev, err := c.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + p.Name + ",reason=TriggeredScaleUp"})
		return err == nil && len(ev.Items) > 0
	}
}
