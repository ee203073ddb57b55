package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/gateway/gatewaytest"
	"github.com/strait-net/strait/internal/testenv"
)

// TestAdminWatch: JSON apply and delete, and a watcher that gets only what
// changed since its revision, waits for the next change, and is refused
// bad parameters with the parameter named.
func TestAdminWatch(t *testing.T) {
	ad, sock := startAdminGateway(t, "watch")
	ctx := t.Context()
	exp := func(name string) catalog.Resource {
		return &catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: catalog.ServiceExportSpec{Target: "127.0.0.1:9", Ports: []catalog.ServicePort{{Port: 80}}}}
	}
	if res, err := ad.ApplyResources([]catalog.Resource{exp("a"), exp("b")}); err != nil || res.Changed != 2 {
		t.Fatalf("ApplyResources = %+v, %v", res, err)
	}
	w, err := ad.Watch(ctx, "ServiceExport", 0, 0)
	if err != nil || len(w.Changed) != 2 || w.Reset || w.Revision != 2 {
		t.Fatalf("Watch(0) = %+v, %v", w, err)
	}
	// A long poll returns with the next change, and only it.
	got := make(chan gateway.WatchResult, 1)
	go func() {
		w, err := ad.Watch(ctx, "ServiceExport", 2, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	if _, err := ad.DeleteResources([]catalog.Resource{exp("a")}); err != nil {
		t.Fatal(err)
	}
	w = <-got
	if len(w.Changed) != 0 || len(w.Deleted) != 1 || w.Deleted[0].Name != "a" || w.Revision != 3 {
		t.Fatalf("Watch(2) after a delete = %+v", w)
	}
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	for _, bad := range []struct{ query, want string }{
		{"since=x", "since:"}, {"since=1&wait=1h", "wait:"}, {"since=1&wait=-1s", "wait:"},
	} {
		resp, err := hc.Get("http://gateway/v1/watch?" + bad.query)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), bad.want) {
			t.Errorf("watch?%s = %d %s, want 400 naming %q", bad.query, resp.StatusCode, body, bad.want)
		}
	}
	if _, err := ad.Apply([]byte("not: [yaml")); err == nil {
		t.Fatal("bad YAML accepted")
	}
	if _, err := ad.ApplyResources([]catalog.Resource{&catalog.Peer{Metadata: catalog.ObjectMeta{Name: "Bad Name"}}}); err == nil || !strings.Contains(err.Error(), "metadata.name") {
		t.Fatalf("invalid resource: %v", err)
	}
}

// TestAdminImportsIncremental: applies realize only what they change, and
// the result is what realizing everything would give: a moved import
// frees its old address, an address claimed by two imports stays open
// for the one left when the other goes, and an import whose address is
// not on this host is reported on every apply until it is fixed. It runs
// with a listener per import address and, as root, steered.
func TestAdminImportsIncremental(t *testing.T) {
	modes := []string{gateway.InterceptListeners}
	if os.Geteuid() == 0 {
		modes = append(modes, gateway.InterceptSteer)
	}
	for _, mode := range modes {
		for _, body := range []string{"binary", "json"} {
			t.Run(mode+"/"+body, func(t *testing.T) { testImportsIncremental(t, mode, body == "json") })
		}
	}
}

func testImportsIncremental(t *testing.T, mode string, jsonBodies bool) {
	dnsAddr := testenv.FreeAddr(t)
	ad, sock := startAdminGatewayWith(t, "incr", mode, dnsAddr)
	if st, err := ad.Status(); err != nil || st.Intercept != mode {
		t.Fatalf("intercept %q, %v; want %s", st.Intercept, err, mode)
	}
	_, portText, _ := net.SplitHostPort(testenv.FreeAddr(t))
	port, _ := strconv.Atoi(portText)
	imp := func(name, ip string) catalog.Resource {
		return &catalog.ServiceImport{Metadata: catalog.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: catalog.ServiceImportSpec{Type: catalog.ClusterSetIP, IPs: []string{ip}, Ports: []catalog.ServicePort{{Port: int32(port)}},
				Clusters: []catalog.ClusterStatus{{Cluster: "b"}}}}
	}
	names := map[string]string{} // stored imports' addresses
	at := func(name, ip string) string { return "ns/" + name + " " + net.JoinHostPort(ip, strconv.Itoa(port)) }
	step := func(what string, del bool, rs []catalog.Resource, warn string, want ...string) {
		t.Helper()
		apply := ad.ApplyResources
		if del {
			apply = ad.DeleteResources
		}
		if jsonBodies { // what an AdminClient sends a gateway without binary bodies
			apply = func(rs []catalog.Resource) (gateway.ApplyResult, error) {
				return postJSON(t, sock, del, rs)
			}
		}
		res, err := apply(rs)
		if err != nil || !strings.Contains(res.Warning, warn) || (warn == "") != (res.Warning == "") {
			t.Fatalf("%s: %+v, %v; want warning %q", what, res, err, warn)
		}
		st, err := ad.Status()
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(want)
		if strings.Join(st.Imports, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: imports %q, want %q", what, st.Imports, want)
		}
		// DNS follows the applies in place: every import stored answers
		// with its address (also one sharing an address, or one whose
		// address is not on this host: the name exists), and nothing else.
		for _, r := range rs {
			if imp := r.(*catalog.ServiceImport); del {
				delete(names, imp.Metadata.Name)
			} else {
				names[imp.Metadata.Name] = imp.Spec.IPs[0]
			}
		}
		for _, n := range []string{"v", "w", "x", "y", "z"} {
			if got := lookupA(t, dnsAddr, n+".ns.svc.clusterset.local."); got != names[n] {
				t.Fatalf("%s: %s resolves to %q, want %q", what, n, got, names[n])
			}
		}
	}
	step("apply x", false, []catalog.Resource{imp("x", "127.77.0.1")}, "", at("x", "127.77.0.1"))
	step("apply y", false, []catalog.Resource{imp("y", "127.77.0.2")}, "", at("x", "127.77.0.1"), at("y", "127.77.0.2"))
	step("move x", false, []catalog.Resource{imp("x", "127.77.0.3")}, "", at("y", "127.77.0.2"), at("x", "127.77.0.3"))
	step("z on y's address", false, []catalog.Resource{imp("z", "127.77.0.2")}, "", at("z", "127.77.0.2"), at("x", "127.77.0.3"))
	step("delete y", true, []catalog.Resource{imp("y", "127.77.0.2")}, "", at("z", "127.77.0.2"), at("x", "127.77.0.3"))
	step("delete z", true, []catalog.Resource{imp("z", "127.77.0.2")}, "", at("x", "127.77.0.3"))
	step("off host", false, []catalog.Resource{imp("w", "192.0.2.1")}, "import ns/w", at("x", "127.77.0.3"))
	step("unrelated apply", false, []catalog.Resource{imp("v", "127.77.0.4")}, "import ns/w", at("x", "127.77.0.3"), at("v", "127.77.0.4"))
	step("fix w", false, []catalog.Resource{imp("w", "127.77.0.5")}, "", at("x", "127.77.0.3"), at("v", "127.77.0.4"), at("w", "127.77.0.5"))
	h, err := ad.Health()
	if err != nil || h.ImportCount != 3 || h.Imports != nil || h.Intercept != mode {
		t.Fatalf("health: %+v, %v; want 3 imports counted, not listed", h, err)
	}
	if !slices.Contains(h.Bodies, "binary") {
		t.Fatalf("health: bodies %q, want binary listed (AdminClient sends it only then)", h.Bodies)
	}
}

// startAdminGateway runs gateway "a" of a fresh clusterset in this process,
// without peers or preconnection, and returns its admin client once the
// admin socket answers, and the socket's path.
func startAdminGateway(t *testing.T, clusterset string) (*gateway.AdminClient, string) {
	t.Helper()
	return startAdminGatewayWith(t, clusterset, gateway.InterceptListeners, "")
}

// startAdminGatewayWith is startAdminGateway with an intercept mode and
// clusterset DNS served at dnsAddr ("" = none).
func startAdminGatewayWith(t *testing.T, clusterset, intercept, dnsAddr string) (*gateway.AdminClient, string) {
	t.Helper()
	dir := t.TempDir()
	if _, err := fabric.InitDir(dir, clusterset, 24*time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if _, err := fabric.IssueFiles(dir, dir, "a", 12*time.Hour); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "a.sock")
	ad := gatewaytest.Start(t, gateway.Config{Cluster: "a", Identity: gateway.IdentityFiles{Dir: dir}, Listen: "127.0.0.1:0",
		Admin: sock, State: filepath.Join(dir, "state.json"), Preconnect: -1, Intercept: intercept, DNS: dnsAddr})
	return ad, sock
}

// lookupA asks the DNS server at addr for name's A record over UDP: the
// address, or "" for an answer without one.
func lookupA(t *testing.T, addr, name string) string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	c := &dns.Client{Timeout: patience}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("dns %s: %v", name, err)
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String()
		}
	}
	return ""
}

// postJSON applies (or deletes) resources with a JSON array body.
func postJSON(t *testing.T, sock string, del bool, rs []catalog.Resource) (gateway.ApplyResult, error) {
	t.Helper()
	var parts []string
	for _, r := range rs {
		b, err := catalog.EncodeJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, string(b))
	}
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	path := "/v1/apply"
	if del {
		path = "/v1/delete"
	}
	resp, err := hc.Post("http://gateway"+path, "application/json", strings.NewReader("["+strings.Join(parts, ",")+"]"))
	if err != nil {
		return gateway.ApplyResult{}, err
	}
	defer resp.Body.Close()
	var res gateway.ApplyResult
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return res, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return res, json.NewDecoder(resp.Body).Decode(&res)
}
