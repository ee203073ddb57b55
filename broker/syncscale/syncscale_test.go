package syncscale

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSyncScaleSmall runs the experiment end to end at a tiny scale, two
// brokers over a real etcd with one killed, with imports: every export must
// reach every other cluster, be imported there and echo through a sample of
// the imports, and every figure must come from a measurement.
func TestSyncScaleSmall(t *testing.T) {
	out, err := exec.Command("../../scripts/k8s-tools.sh").Output()
	if err != nil {
		t.Fatalf("scripts/k8s-tools.sh: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Binary: testenv.StraitBinary(t), Etcd: filepath.Join(strings.TrimSpace(string(out)), "etcd"), Dir: t.TempDir(),
		Clusters: 3, Services: 60, Brokers: 2, Batch: 5, Kill: true, Timeout: time.Minute, Imports: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteTable(&b, []Result{res})
	t.Log("\n" + b.String())
	switch {
	case res.Store != "etcd":
		t.Errorf("store %q, want etcd for two brokers", res.Store)
	case res.P50 <= 0 || res.Max < res.P99 || res.P99 < res.P50:
		t.Errorf("latencies p50 %v p99 %v max %v are not ordered measurements", res.P50, res.P99, res.Max)
	case res.AllEverywhere < res.EverywhereMax:
		t.Errorf("all everywhere after %v, before the slowest export (%v)", res.AllEverywhere, res.EverywhereMax)
	// CPU is read from every process's stat or Run fails; a run this small
	// may well cost less than one 10 ms tick, so 0 is a valid reading.
	case res.BrokerCPU < 0 || res.EtcdCPU < 0 || res.AgentCPU < 0 || res.GatewayCPU < 0:
		t.Errorf("CPU brokers %v etcd %v agents %v gateways %v: a process's CPU time went backwards", res.BrokerCPU, res.EtcdCPU, res.AgentCPU, res.GatewayCPU)
	case res.BrokerPeakRSS == 0 || res.EtcdPeakRSS == 0:
		t.Errorf("broker peak %d, etcd peak %d: not measured", res.BrokerPeakRSS, res.EtcdPeakRSS)
	case res.WireIn == 0 || res.WireOut == 0:
		t.Errorf("wire bytes in %d out %d: not counted", res.WireIn, res.WireOut)
	case res.Sampled != 3*20 || res.Usable != res.Sampled:
		t.Errorf("usable imports %d of %d sampled, want all of 60 (20 per gateway)", res.Usable, res.Sampled)
	case res.AllImported < res.ImportMax || res.ImportP50 <= 0:
		t.Errorf("imports p50 %v max %v, all imported after %v: not measurements", res.ImportP50, res.ImportMax, res.AllImported)
	case res.Killed == "" || res.Stall <= 0:
		t.Errorf("killed %q, stall %v: the kill was not measured", res.Killed, res.Stall)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Binary: "x", Clusters: 6, Services: 100, Brokers: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		want string
		edit func(*Config)
	}{
		{"binary", func(c *Config) { c.Binary = "" }},
		{"clusters", func(c *Config) { c.Clusters = 1 }},
		{"services", func(c *Config) { c.Services = 3 }},
		{"bolt serves one broker", func(c *Config) { c.Brokers, c.Store = 2, "bolt" }},
		{"etcd binary", func(c *Config) { c.Brokers = 3 }},
		{"kill", func(c *Config) { c.Kill = true }},
		{"store", func(c *Config) { c.Store = "redis" }},
	} {
		c := ok
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error naming %q", err, tc.want)
		}
	}
}
