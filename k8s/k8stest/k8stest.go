// Package k8stest starts real Kubernetes API servers for tests: etcd and
// kube-apiserver built by scripts/k8s-tools.sh from Go modules (cached
// outside the checkout; the script is a no-op when they are there), run by
// controller-runtime's envtest, with strait's CRDs from deploy/crds
// installed. Each test binary should share one server where it can: one
// takes a few seconds to start.
package k8stest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/strait-net/strait/k8s/api"
)

// Root is the module's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// Assets returns the directory with kube-apiserver, etcd and kubectl,
// building them with scripts/k8s-tools.sh if they are missing.
func Assets() (string, error) {
	assetsOnce.Do(func() {
		cmd := exec.Command(filepath.Join(Root(), "scripts", "k8s-tools.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			assetsErr = fmt.Errorf("scripts/k8s-tools.sh: %v\n%s", err, stderr.String())
			return
		}
		assetsDir = strings.TrimSpace(string(out))
	})
	return assetsDir, assetsErr
}

// Kubectl returns the path of the kubectl binary k8s-tools.sh built.
func Kubectl(t testing.TB) string {
	t.Helper()
	dir, err := Assets()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "kubectl")
}

// Cluster is one running API server.
type Cluster struct {
	Env *envtest.Environment
	// Config is an admin's (system:masters) configuration.
	Config *rest.Config
	// Client is an admin client with strait's scheme.
	Client client.Client
}

// Start starts etcd and an API server with strait's CRDs installed. The
// API server runs with RBAC, as clusters do; no controllers run (no
// garbage collector, no namespace lifecycle, no endpoints reconciler).
// Stop it with Stop.
func Start() (*Cluster, error) {
	dir, err := Assets()
	if err != nil {
		return nil, err
	}
	// envtest picks etcd's and the API server's ports by binding port 0
	// and closing, and its own retries reuse the ports of the first try:
	// a port some other process took in between (any outgoing connection
	// on a busy host can) failed all five. Each attempt here is a new
	// Environment, with new ports.
	const attempts = 3
	for i := 1; ; i++ {
		env, stderr := environment(dir)
		cfg, err := env.Start()
		if err != nil {
			_ = env.Stop()
			err = fmt.Errorf("start api server (attempt %d of %d): %w; kube-apiserver's stderr ends:\n%s", i, attempts, err, stderr.tail())
			if i < attempts {
				fmt.Fprintln(os.Stderr, "k8stest:", err)
				continue
			}
			return nil, err
		}
		c, err := client.New(cfg, client.Options{Scheme: api.NewScheme()})
		if err != nil {
			_ = env.Stop()
			return nil, err
		}
		return &Cluster{Env: env, Config: cfg, Client: c}, nil
	}
}

// APIServer starts one API server for t (Start) and stops it when t ends;
// with -short it skips t, as a test that takes seconds to start a server
// should.
func APIServer(t testing.TB) *Cluster {
	t.Helper()
	return APIServers(t, 1)[0]
}

// APIServers is APIServer for n servers, started side by side.
func APIServers(t testing.TB, n int) []*Cluster {
	t.Helper()
	if testing.Short() {
		if n == 1 {
			t.Skip("starts an API server")
		}
		t.Skipf("starts %d API servers", n)
	}
	clusters := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Add(1)
		go func() { defer wg.Done(); clusters[i], errs[i] = Start() }()
	}
	wg.Wait()
	for _, c := range clusters {
		if c != nil {
			t.Cleanup(func() { _ = c.Stop() })
		}
	}
	for i, err := range errs {
		switch {
		case err != nil && n == 1:
			t.Fatal(err)
		case err != nil:
			t.Fatalf("API server %d of %d: %v", i+1, n, err)
		}
	}
	return clusters
}

// environment is one envtest Environment of the API server, with strait's
// CRDs, and what the API server writes to stderr.
func environment(dir string) (*envtest.Environment, *tailBuffer) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join(Root(), "deploy", "crds")},
		ErrorIfCRDPathMissing: true,
		Scheme:                api.NewScheme(),
		// envtest's defaults (20s to start etcd or the API server, 10s
		// for the CRDs to be served) are tight on a loaded 2-core CI
		// host, where tests start two servers side by side; these only
		// bound a hung start.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
		CRDInstallOptions:        envtest.CRDInstallOptions{MaxTime: time.Minute},
	}
	// The other flags this needs (service-cluster-ip-range 10.0.0.0/24, the
	// ServiceAccount admission plugin off, RBAC) are envtest's defaults.
	apiServer := env.ControlPlane.GetAPIServer()
	apiServer.Configure().Set("endpoint-reconciler-type", "none")
	stderr := &tailBuffer{}
	apiServer.Err = stderr
	return env, stderr
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - 4096; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Stop stops the API server and etcd and removes their data.
func (c *Cluster) Stop() error { return c.Env.Stop() }

// User returns a configuration authenticating as name in groups (a
// client certificate, as envtest provisions users), with no permissions
// but those RBAC objects grant that user or group.
func (c *Cluster) User(name string, groups ...string) (*rest.Config, error) {
	u, err := c.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return u.Config(), nil
}

// Kubeconfig writes a kubeconfig file for cfg's user into dir.
func (c *Cluster) Kubeconfig(name string, groups []string, dir string) (string, error) {
	u, err := c.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", err
	}
	b, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".kubeconfig")
	return path, os.WriteFile(path, b, 0o600)
}
