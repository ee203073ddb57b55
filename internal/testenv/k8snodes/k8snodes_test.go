package k8snodes

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does, so that a failure can be checked.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// parseIn runs parse on a recorder in its own goroutine, for Goexit.
func parseIn(t *testing.T, out string, clusters ...string) (*Nodes, string) {
	n := newNodes("lab", "")
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.parse(r, out, clusters)
	}()
	<-done
	return n, r.fatal
}

func TestParse(t *testing.T) {
	out := "building images\n" +
		"cluster a netns st-lab-a-n1 apiserver 10.99.1.1 kubeconfig /run/a.kubeconfig\n" +
		"cluster b netns st-lab-b-n1 apiserver 10.99.2.1 kubeconfig /run/b.kubeconfig\n"
	n, fatal := parseIn(t, out, "a", "b")
	if fatal != "" {
		t.Fatal(fatal)
	}
	if n.Addr["b"] != "10.99.2.1" || n.Netns["b"] != "st-lab-b-n1" || n.Kubeconfig["a"] != "/run/a.kubeconfig" {
		t.Errorf("parsed %+v", n)
	}
	// A cluster the script did not print is an error naming it.
	_, fatal = parseIn(t, out, "a", "c")
	if !strings.Contains(fatal, "no address for cluster c") {
		t.Errorf("missing cluster c: %q", fatal)
	}
}

func TestEnv(t *testing.T) {
	if n := newNodes("lab", "/bin/strait"); n.Env[len(n.Env)-1] != "STRAIT=/bin/strait" {
		t.Errorf("env ends %q, want STRAIT set", n.Env[len(n.Env)-1])
	}
	for _, e := range newNodes("lab", "").Env {
		if e == "STRAIT=" {
			t.Errorf("env without a binary has %q", e)
		}
	}
}
