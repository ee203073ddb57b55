package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"sync/atomic"
	"time"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/internal/procs"
)

// The admin API is HTTP over a unix socket that only root can open: the
// socket's file permissions are the authentication, as for the Docker and
// containerd sockets.
//
//	POST   /v1/apply      body: YAML resources   → ApplyResult (or, with Content-Type
//	                                               application/json, a JSON array of
//	                                               resources: cheaper to parse; or with
//	                                               ContentTypeResources the binary form
//	                                               of adminwire.go: cheaper still)
//	POST   /v1/delete     body: as /v1/apply     → ApplyResult (deletes by kind, namespace, name)
//	GET    /v1/resources[?kind=K]                → YAML resources
//	GET    /v1/resources?format=json[&kind=K]    → JSON array of resources (cheap for
//	                                               agents polling thousands of exports)
//	GET    /v1/watch?since=R[&kind=K][&wait=D]   → Changes after revision R (JSON); with
//	                                               wait (a Go duration, at most 20s) it
//	                                               long-polls until something changed
//	GET    /v1/status[?lists=false]              → Status (without the import and
//	                                               export lists: counts only)
const maxAdminBody = 8 << 20

// maxWatchWait bounds a watch's long poll.
const maxWatchWait = 20 * time.Second // below AdminClient's request timeout

// Changes is what a watch returns: the resources created or replaced after
// the revision asked for and the keys deleted since, as of Revision. Reset
// means the gateway could not tell what changed (its deletion history
// begins later, or it was restarted with another state): Changed then
// holds every resource and the watcher drops whatever else it holds.
type Changes struct {
	Revision uint64            `json:"revision"`
	Reset    bool              `json:"reset,omitempty"`
	Changed  []json.RawMessage `json:"changed"`
	Deleted  []DeletedKey      `json:"deleted,omitempty"`
}

// DeletedKey names a deleted resource.
type DeletedKey struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// ApplyResult tells what an apply or delete changed.
type ApplyResult struct {
	Changed   int    `json:"changed"`
	Unchanged int    `json:"unchanged"`
	Warning   string `json:"warning,omitempty"`
}

// Status is a gateway's view of itself.
type Status struct {
	Cluster  string `json:"cluster"`
	WAN      string `json:"wan"`
	Revision uint64 `json:"revision"`
	// Intercept is how imports receive connections: "steer" (one listener
	// for every IPv4 import address, see Config.Intercept) or "listeners".
	Intercept string       `json:"intercept"`
	Peers     []PeerStatus `json:"peers"`
	Imports   []string     `json:"imports"`
	// UDPImports are the UDP addresses of imports, with their flows open.
	UDPImports []string `json:"udp_imports,omitempty"`
	Exports    []string `json:"exports"`
	// ImportCount counts import addresses served, ExportCount exports
	// (also when the lists are left out: AdminClient.Health).
	ImportCount int `json:"importCount"`
	ExportCount int `json:"exportCount"`
	// DataPlanes is each peer's data-plane mode, where the configuration
	// or the peer named one (docs/packet.md, "The gateway").
	DataPlanes []PeerDataPlane `json:"dataPlanes,omitempty"`
	// Bodies lists the apply bodies the admin API reads besides YAML and
	// JSON ("binary": ContentTypeResources); a client asks before using
	// one, so a newer agent keeps working with an older gateway.
	Bodies []string `json:"bodies,omitempty"`
}

// PeerStatus describes the sessions to one peer cluster.
type PeerStatus struct {
	Cluster string        `json:"cluster"`
	Addrs   []string      `json:"addrs"`
	Live    []string      `json:"live"`
	RTT     time.Duration `json:"rttNanos"`
	// ProbeInterval is how often the sessions' pool probes the peer's
	// gateways now: probe-interval, or a slower one while the packet
	// mode's prober judges them (docs/packet.md, "What the gateway
	// processes cost").
	ProbeInterval time.Duration `json:"probeIntervalNanos"`
	// Gateways is the health and load of each of the peer's gateways as
	// this gateway sees them.
	Gateways []RemoteGateway `json:"gateways"`
}

// RemoteGateway is one gateway of a peer cluster.
type RemoteGateway struct {
	Addr    string `json:"addr"`
	Live    bool   `json:"live"`
	Buckets int    `json:"buckets"` // of the table's size: its share of new flows
	Size    int    `json:"size"`
	Streams uint64 `json:"streams"` // opened on it since start
	Downs   uint64 `json:"downs"`   // live → dead transitions
}

func (g *Gateway) serveAdmin(ctx context.Context) (*http.Server, error) {
	path := g.cfg.admin()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	// A socket file left by a gateway that crashed would make Listen fail.
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("admin socket %s: another gateway is serving it", path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/apply", g.handleChange(false))
	mux.HandleFunc("POST /v1/delete", g.handleChange(true))
	mux.HandleFunc("GET /v1/resources", g.handleGet)
	mux.HandleFunc("GET /v1/watch", g.handleWatch)
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, g.status(r.URL.Query().Get("lists") != "false"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	g.spawn(func() { _ = srv.Serve(ln) })
	g.spawn(func() {
		<-ctx.Done()
		_ = srv.Close()
		_ = os.Remove(path)
	})
	return srv, nil
}

func (g *Gateway) handleChange(del bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Thousands of resources take milliseconds to decode and
		// realize: on a gateway running Go on one P (strait gateway
		// --procs auto) that would hold the traffic's goroutines back
		// meanwhile.
		defer procs.Boost()()
		var rs []catalog.Resource
		var err error
		ct := r.Header.Get("Content-Type")
		decoded := ct == "application/json" || ct == ContentTypeResources
		switch ct {
		case ContentTypeResources:
			var body []byte
			if body, err = io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1)); err == nil && len(body) > maxAdminBody {
				err = fmt.Errorf("decode resources: body larger than %d bytes (apply in smaller calls)", maxAdminBody)
			} else if err == nil {
				rs, err = decodeResourcesBinary(body)
			}
		case "application/json":
			rs, err = decodeResources(io.LimitReader(r.Body, maxAdminBody))
		default:
			rs, err = catalog.Parse(io.LimitReader(r.Body, maxAdminBody))
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		var n int
		if del {
			keys := make([]catalog.Key, len(rs))
			for i, res := range rs {
				keys[i] = res.Key()
			}
			n, err = g.store.Delete(keys...)
		} else if decoded {
			n, err = g.store.ApplyDecoded(rs...) // decoded and validated as DecodeJSON does, and ours
		} else {
			n, err = g.store.Apply(rs...)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		res := ApplyResult{Changed: n, Unchanged: len(rs) - n}
		if err := g.reconcile(); err != nil {
			// The resources are stored; what could not be realized (e.g. an
			// import address not on this host) is reported, not rolled back.
			res.Warning = err.Error()
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// decodeResources reads a JSON array of resources, each decoded and
// validated as catalog.DecodeJSON does.
func decodeResources(r io.Reader) ([]catalog.Resource, error) {
	var raw []json.RawMessage
	if err := json.NewDecoder(r).Decode(&raw); err != nil {
		return nil, fmt.Errorf("decode resources: want a JSON array of resources: %w", err)
	}
	out := make([]catalog.Resource, len(raw))
	for i, b := range raw {
		res, err := catalog.DecodeJSON(b)
		if err != nil {
			return nil, fmt.Errorf("resource %d: %w", i, err)
		}
		out[i] = res
	}
	return out, nil
}

func (g *Gateway) handleGet(w http.ResponseWriter, r *http.Request) {
	var kinds []catalog.Kind
	if k := r.URL.Query().Get("kind"); k != "" {
		kinds = append(kinds, catalog.Kind(k))
	}
	if r.URL.Query().Get("format") == "json" {
		list := g.store.Set().List(kinds...)
		out := make([]json.RawMessage, len(list))
		for i, res := range list {
			b, err := catalog.EncodeJSON(res)
			if err != nil {
				writeError(w, http.StatusInternalServerError, err)
				return
			}
			out[i] = b
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	var buf bytes.Buffer
	if err := catalog.Encode(&buf, g.store.Set().List(kinds...)); err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(buf.Bytes())
}

// handleWatch answers with the changes after a revision, waiting for one
// if asked to: agents follow thousands of exports by deltas instead of
// listing them all on every change.
func (g *Gateway) handleWatch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := strconv.ParseUint(q.Get("since"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("since: %q is not a revision (a non-negative integer)", q.Get("since")))
		return
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > maxWatchWait {
			writeError(w, http.StatusBadRequest, fmt.Errorf("wait: %q is not a duration between 0 and %s", v, maxWatchWait))
			return
		}
	}
	var kinds []catalog.Kind
	if k := q.Get("kind"); k != "" {
		kinds = append(kinds, catalog.Kind(k))
	}
	set := g.store.Set()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-set.Wait(since):
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	changed, deleted, rev, reset := set.Changes(since, kinds...)
	out := Changes{Revision: rev, Reset: reset, Changed: make([]json.RawMessage, len(changed))}
	for i, res := range changed {
		if out.Changed[i], err = catalog.EncodeJSON(res); err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
	}
	for _, k := range deleted {
		out.Deleted = append(out.Deleted, DeletedKey{Kind: string(k.Kind), Namespace: k.Namespace, Name: k.Name})
	}
	writeJSON(w, http.StatusOK, out)
}

// status is the gateway's Status; without lists, Imports and Exports are
// left out (tens of thousands of lines an agent's health check has no use
// for) and only counted.
func (g *Gateway) status(lists bool) Status {
	st := Status{Cluster: g.cfg.Cluster, Revision: g.store.Set().Revision(), Peers: g.peerStatus(), DataPlanes: g.packet.status(), Bodies: []string{bodyBinary}}
	if g.wan != nil {
		st.WAN = g.wan.Addr().String()
	}
	g.mu.Lock()
	st.Intercept = InterceptListeners
	if g.steering != nil {
		st.Intercept = InterceptSteer
	}
	st.ImportCount = len(g.listeners)
	if lists {
		for addr, l := range g.listeners {
			r := l.route.Load()
			st.Imports = append(st.Imports, r.ns+"/"+r.name+" "+addr)
		}
	}
	st.UDPImports = g.udpStatus()
	g.mu.Unlock()
	exports := g.routes.Load().exports
	st.ExportCount = len(exports)
	if lists {
		for k := range exports {
			st.Exports = append(st.Exports, k.ns+"/"+k.name)
		}
	}
	sort.Strings(st.Imports)
	sort.Strings(st.Exports)
	return st
}

func (g *Gateway) peerStatus() []PeerStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]PeerStatus, 0, len(g.peers))
	for id, p := range g.peers {
		ps := PeerStatus{Cluster: id, Addrs: p.addrs, Live: p.pool.Live(), RTT: p.pool.Stats().RTT, ProbeInterval: p.pool.ProbeInterval()}
		for _, h := range p.pool.Gateways() {
			ps.Gateways = append(ps.Gateways, RemoteGateway{Addr: h.Addr, Live: h.Live, Buckets: h.Buckets, Size: h.Size, Streams: h.Streams, Downs: h.Downs})
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// AdminClient talks to a gateway's admin socket.
type AdminClient struct {
	Socket string
	http   http.Client

	// binary is whether the gateway reads ContentTypeResources bodies:
	// 0 not asked yet, 1 yes, 2 no (asked again after a while: the
	// gateway may have been upgraded).
	binary  atomic.Int32
	askedAt atomic.Int64 // unix nanoseconds of the last no
}

// bodyBinary is Status.Bodies' name for ContentTypeResources.
const bodyBinary = "binary"

// binaryBodies reports whether the gateway reads binary apply bodies,
// asking it once (and again a minute after a no).
func (c *AdminClient) binaryBodies() bool {
	switch c.binary.Load() {
	case 1:
		return true
	case 2:
		if time.Since(time.Unix(0, c.askedAt.Load())) < time.Minute {
			return false
		}
	}
	st, err := c.Health()
	if err != nil {
		return false // the apply that follows will say why
	}
	if slices.Contains(st.Bodies, bodyBinary) {
		c.binary.Store(1)
		return true
	}
	c.askedAt.Store(time.Now().UnixNano())
	c.binary.Store(2)
	return false
}

// NewAdminClient returns a client for the socket at path ("" means the
// default path).
func NewAdminClient(path string) *AdminClient {
	if path == "" {
		path = DefaultAdmin
	}
	c := &AdminClient{Socket: path}
	c.http.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	c.http.Timeout = 30 * time.Second
	return c
}

// Close closes the client's idle connections to the socket, so that a
// caller done with the gateway (or about to kill it) leaves no connection
// and goroutine behind. A later request dials again.
func (c *AdminClient) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

func (c *AdminClient) do(method, path string, body io.Reader, out any) error {
	return c.doCtx(context.Background(), method, path, body, out)
}

func (c *AdminClient) doCtx(ctx context.Context, method, path string, body io.Reader, out any, contentType ...string) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://gateway"+path, body)
	if err != nil {
		return err
	}
	if len(contentType) > 0 {
		req.Header.Set("Content-Type", contentType[0])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("gateway admin socket %s: %w", c.Socket, unwrapURL(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("gateway: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	switch out := out.(type) {
	case nil:
	case *[]byte:
		*out = b
	default:
		return json.Unmarshal(b, out)
	}
	return nil
}

func unwrapURL(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		return ue.Unwrap()
	}
	return err
}

// Apply sends YAML resources to be created or replaced.
func (c *AdminClient) Apply(yaml []byte) (ApplyResult, error) {
	var r ApplyResult
	return r, c.do("POST", "/v1/apply", bytes.NewReader(yaml), &r)
}

// ApplyResources sends resources to be created or replaced, encoded in
// the binary form when the gateway reads it and as JSON otherwise (what
// programs applying thousands should use).
func (c *AdminClient) ApplyResources(rs []catalog.Resource) (ApplyResult, error) {
	return c.sendResources("/v1/apply", rs)
}

// DeleteResources removes the resources named, sent as ApplyResources
// sends them.
func (c *AdminClient) DeleteResources(rs []catalog.Resource) (ApplyResult, error) {
	return c.sendResources("/v1/delete", rs)
}

func (c *AdminClient) sendResources(path string, rs []catalog.Resource) (ApplyResult, error) {
	var r ApplyResult
	if c.binaryBodies() {
		b, err := appendResources(nil, rs)
		if err != nil {
			return r, err
		}
		err = c.doCtx(context.Background(), "POST", path, bytes.NewReader(b), &r, ContentTypeResources)
		if err != nil {
			c.binary.Store(0) // ask again next time: the gateway may have been replaced by an older one
		}
		return r, err
	}
	body, err := encodeResources(rs)
	if err != nil {
		return r, err
	}
	return r, c.doCtx(context.Background(), "POST", path, body, &r, "application/json")
}

func encodeResources(rs []catalog.Resource) (io.Reader, error) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, r := range rs {
		b, err := catalog.EncodeJSON(r)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	return &buf, nil
}

// Delete removes the resources the YAML names.
func (c *AdminClient) Delete(yaml []byte) (ApplyResult, error) {
	var r ApplyResult
	return r, c.do("POST", "/v1/delete", bytes.NewReader(yaml), &r)
}

// Get returns the gateway's resources as YAML, all or of one kind.
func (c *AdminClient) Get(kind string) ([]byte, error) {
	var b []byte
	path := "/v1/resources"
	if kind != "" {
		path += "?kind=" + kind
	}
	return b, c.do("GET", path, nil, &b)
}

// List returns the gateway's resources, all or of one kind, decoded and
// validated (the JSON form of Get, for programs).
func (c *AdminClient) List(kind string) ([]catalog.Resource, error) {
	var raw []json.RawMessage
	path := "/v1/resources?format=json"
	if kind != "" {
		path += "&kind=" + kind
	}
	if err := c.do("GET", path, nil, &raw); err != nil {
		return nil, err
	}
	out := make([]catalog.Resource, len(raw))
	for i, b := range raw {
		r, err := catalog.DecodeJSON(b)
		if err != nil {
			return nil, fmt.Errorf("gateway resource %d: %w", i, err)
		}
		out[i] = r
	}
	return out, nil
}

// Watch returns the changes after revision since, of one kind or all
// (kind ""), waiting up to wait for one (0: answer at once). Changed
// resources are decoded and validated.
func (c *AdminClient) Watch(ctx context.Context, kind string, since uint64, wait time.Duration) (WatchResult, error) {
	var raw Changes
	path := "/v1/watch?since=" + strconv.FormatUint(since, 10)
	if kind != "" {
		path += "&kind=" + kind
	}
	if wait > 0 {
		path += "&wait=" + wait.String()
	}
	if err := c.doCtx(ctx, "GET", path, nil, &raw); err != nil {
		return WatchResult{}, err
	}
	res := WatchResult{Revision: raw.Revision, Reset: raw.Reset, Changed: make([]catalog.Resource, len(raw.Changed))}
	for i, b := range raw.Changed {
		r, err := catalog.DecodeJSON(b)
		if err != nil {
			return WatchResult{}, fmt.Errorf("gateway watch: resource %d: %w", i, err)
		}
		res.Changed[i] = r
	}
	for _, k := range raw.Deleted {
		res.Deleted = append(res.Deleted, catalog.Key{Kind: catalog.Kind(k.Kind), Namespace: k.Namespace, Name: k.Name})
	}
	return res, nil
}

// WatchResult is Changes decoded.
type WatchResult struct {
	Revision uint64
	Reset    bool
	Changed  []catalog.Resource
	Deleted  []catalog.Key
}

// Status returns the gateway's status.
func (c *AdminClient) Status() (Status, error) {
	var s Status
	return s, c.do("GET", "/v1/status", nil, &s)
}

// Health returns the gateway's status without the lists of imports and
// exports (only their counts): what a health check polling every second
// should ask, as the lists grow with the clusterset.
func (c *AdminClient) Health() (Status, error) {
	var s Status
	return s, c.do("GET", "/v1/status?lists=false", nil, &s)
}
