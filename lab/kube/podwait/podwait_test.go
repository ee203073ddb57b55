package podwait

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func waiting(name, image, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

func TestCheck(t *testing.T) {
	sched := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 Insufficient cpu."}
	crash := waiting("emulate", "img", "CrashLoopBackOff", "back-off 10s restarting failed container")
	crash.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Message: "no route from this node to 192.0.2.0/24\n"}
	for _, tc := range []struct {
		name  string
		st    corev1.PodStatus
		want  string
		stuck bool
	}{
		{"ready", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}, "", false},
		{"pull", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("echo", "x:1", "ImagePullBackOff", "Back-off pulling image")}},
			"container echo: ImagePullBackOff Back-off pulling image (image x:1)", true},
		{"never pull", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("echo", "x:1", "ErrImageNeverPull", `Container image "x:1" is not present`)}},
			`container echo: ErrImageNeverPull Container image "x:1" is not present`, true},
		{"crash", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{crash}},
			"container emulate: CrashLoopBackOff back-off 10s restarting failed container: last exit 1 no route from this node to 192.0.2.0/24", true},
		{"creating", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("echo", "x", "ContainerCreating", "")}},
			"container echo: ContainerCreating", false},
		{"exited", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "emulate",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 2, Message: "bad flag"}}}}},
			"container emulate: terminated (Error, exit 2) bad flag", true},
		{"failed", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "load",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}}}},
			"phase Failed; container load: terminated (Error, exit 1)", true},
		{"unschedulable, first seen", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{sched}},
			"unschedulable: 0/1 nodes are available: 1 Insufficient cpu.", false},
		{"pending", corev1.PodStatus{Phase: corev1.PodPending}, "phase Pending", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w Watcher
			s := w.Check(context.Background(), &corev1.Pod{Status: tc.st})
			if s.Why != tc.want || s.Stuck != tc.stuck || s.Ready != (tc.name == "ready") {
				t.Errorf("got %+v, want why %q stuck %v", s, tc.want, tc.stuck)
			}
		})
	}
	// A replaced pod killed on its way out is not stuck.
	var w Watcher
	gone := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "echo",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 143}}}}}}
	gone.DeletionTimestamp = &metav1.Time{Time: time.Unix(1000, 0)}
	if s := w.Check(context.Background(), gone); s.Stuck {
		t.Errorf("a pod being deleted (exit 143) counts as stuck: %+v", s)
	}
}

// TestUnschedulableGrace: an unschedulable pod is stuck once the scheduler
// has refused it for the grace, counted from when the watcher first saw it
// so; not while an autoscaler adds a node, and the count starts again when
// the pod was schedulable in between.
func TestUnschedulableGrace(t *testing.T) {
	now := time.Unix(1000, 0)
	scaling := false
	w := Watcher{Grace: 20 * time.Second, Now: func() time.Time { return now },
		ScaleUp: func(context.Context, *corev1.Pod) bool { return scaling }}
	refused := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 node(s) had untolerated taint {strait.dev/test: }."}
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{refused}}}
	p.UID = "u1"
	step := func(d time.Duration, stuck bool, want string) {
		t.Helper()
		now = now.Add(d)
		s := w.Check(context.Background(), p)
		if s.Stuck != stuck || !strings.Contains(s.Why, want) {
			t.Fatalf("after %v: got %+v, want stuck %v, why containing %q", d, s, stuck, want)
		}
	}
	step(0, false, "unschedulable: 0/1 nodes")
	step(19*time.Second, false, "unschedulable: 0/1 nodes")
	scaling = true
	step(2*time.Second, false, "TriggeredScaleUp")
	scaling = false
	step(time.Second, true, "unschedulable for 22s: 0/1 nodes are available: 1 node(s) had untolerated taint")

	// Schedulable in between (the scheduler found room, then lost it
	// again): a new grace.
	p.Status.Conditions = nil
	step(time.Second, false, "phase Pending")
	p.Status.Conditions = []corev1.PodCondition{refused}
	step(time.Second, false, "unschedulable: ")

	// Another pod has its own count.
	q := p.DeepCopy()
	q.UID = "u2"
	now = now.Add(time.Minute)
	if s := w.Check(context.Background(), q); s.Stuck {
		t.Fatalf("a pod seen unschedulable for the first time is stuck: %+v", s)
	}
}

func TestNode(t *testing.T) {
	p := &corev1.Pod{}
	if n := Node(p); n != "" {
		t.Fatalf("Node of a bare pod: %q", n)
	}
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"a-n1"}}}}}}}}
	if n := Node(p); n != "a-n1" {
		t.Fatalf("Node of an unscheduled DaemonSet pod: %q, want a-n1", n)
	}
	p.Spec.NodeName = "a-n2"
	if n := Node(p); n != "a-n2" {
		t.Fatalf("Node of a scheduled pod: %q, want a-n2", n)
	}
}
