package broker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/strait-net/strait/catalog"
)

// Wire format: every message is a frame, a 4-byte big-endian length and
// that many bytes of one JSON object whose "t" field says what it is, or,
// for snapshots, deltas and publishes, of the binary encoding in
// wirebin.go (the message is the same; brokers accept JSON publishes too). A frame is at most MaxFrame bytes; larger content
// (snapshots, big publishes) travels in several frames.
//
//	client → broker   hello    {v, since}          once, first
//	                  publish  {seq, cluster, base | cont, gateways?, put, del}
//	broker → client   welcome  {broker, cluster, rev, own}
//	                  snapshot {entries, more, rev}  when resuming is impossible
//	                  delta    {rev, entries}        in revision order
//	                  ack      {seq, rev}            one per publish
//	                  error    {code, msg, rev}      then the broker closes
//
// An entry is {k, r} and its value: x, the Export itself, for an export
// key; v, the stored JSON, for any other key; neither when it was deleted.
// Exports are the bulk of every delta, and typed they decode in one pass
// into what the client keeps, instead of a raw value decoded again per
// entry. A broker sends entries only as binary frames; their JSON form
// remains what check validates and what tests write by hand.
const (
	// ProtocolVersion is the hello's v. 2: entries carry exports typed
	// (x). 3: snapshots and deltas are binary frames (wirebin.go).
	ProtocolVersion = 3
	// MaxFrame bounds one frame's body, JSON or binary.
	MaxFrame = 4 << 20
	// MaxExportsPerFrame bounds a publish frame's put and del lists; the
	// client splits larger publishes (also by size, see publishChunk).
	MaxExportsPerFrame = 10000
	// publishChunk is the size the client fills a publish frame to (by an
	// upper estimate of each export's encoding).
	publishChunk = 1 << 20
	// snapshotChunk is how many entries one snapshot frame carries.
	snapshotChunk = 5000
)

// Message types.
const (
	msgHello    = "hello"
	msgPublish  = "publish"
	msgWelcome  = "welcome"
	msgSnapshot = "snapshot"
	msgDelta    = "delta"
	msgAck      = "ack"
	msgError    = "error"
)

// Error codes of error frames.
const (
	CodeMalformed = "malformed" // the frame did not decode or broke a rule
	CodeTooLarge  = "too_large" // the frame exceeded MaxFrame
	CodeForbidden = "forbidden" // a write outside the sender's own cluster
	CodeStale     = "stale"     // base revision older than the cluster's entries: a replay or a lost race
	CodeFuture    = "future"    // resume revision ahead of the store
	CodeInternal  = "internal"  // the store failed
)

// message is every frame's JSON. Fields unused by a type must be absent.
type message struct {
	T string `json:"t"`

	// hello
	V     int    `json:"v,omitempty"`
	Since uint64 `json:"since,omitempty"`

	// publish
	Seq      uint64     `json:"seq,omitempty"`
	Base     uint64     `json:"base,omitempty"`
	Cont     bool       `json:"cont,omitempty"` // based on this connection's previous publish
	Gateways *[]Gateway `json:"gateways,omitempty"`
	Put      []Export   `json:"put,omitempty"`
	Del      []string   `json:"del,omitempty"`

	// welcome, snapshot, delta, ack, error
	Broker  string      `json:"broker,omitempty"`
	Cluster string      `json:"cluster,omitempty"`
	Rev     uint64      `json:"rev,omitempty"`
	Own     uint64      `json:"own,omitempty"` // welcome: revision of the cluster's own entries
	Entries []wireEntry `json:"entries,omitempty"`
	More    bool        `json:"more,omitempty"`
	Code    string      `json:"code,omitempty"`
	Msg     string      `json:"msg,omitempty"`
}

// wireEntry is a store Entry as a client decodes it: an export's value as
// Export, any other value as JSON; neither: deleted.
type wireEntry struct {
	Key    string          `json:"k"`
	Value  json.RawMessage `json:"v,omitempty"`
	Export *Export         `json:"x,omitempty"`
	ModRev uint64          `json:"r"`
}

// ProtocolError is a frame the peer should not have sent; Code is one of
// the Code constants.
type ProtocolError struct {
	Code string
	Msg  string
}

func (e *ProtocolError) Error() string { return e.Code + ": " + e.Msg }

func protoErr(code, format string, args ...any) *ProtocolError {
	return &ProtocolError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// writeFrame encodes m as one frame on w.
func writeFrame(w io.Writer, m *message) error {
	var data []byte
	var err error
	if m.T == msgPublish {
		data = appendPublishFrame(nil, m)
	} else if data, err = json.Marshal(m); err != nil {
		return fmt.Errorf("encode %s: %w", m.T, err)
	}
	if len(data) > MaxFrame {
		return protoErr(CodeTooLarge, "%s frame of %d bytes exceeds %d", m.T, len(data), MaxFrame)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(data)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// readFrame reads and decodes one frame. A frame over MaxFrame is rejected
// before its body is read; errors other than I/O are *ProtocolError.
func readFrame(r *bufio.Reader) (*message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return nil, protoErr(CodeTooLarge, "frame of %d bytes exceeds %d", n, MaxFrame)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("frame body: %w", err)
	}
	if n > 0 && data[0] == binEntries {
		return decodeEntriesFrame(data)
	}
	if n > 0 && data[0] == binPublish {
		return decodePublishFrame(data)
	}
	return decodeMessage(data)
}

// decodeMessage decodes one frame's JSON strictly and checks that the
// fields fit its type.
func decodeMessage(data []byte) (*message, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m message
	if err := dec.Decode(&m); err != nil {
		return nil, protoErr(CodeMalformed, "frame: %v", err)
	}
	if dec.More() {
		return nil, protoErr(CodeMalformed, "frame: data after the JSON object")
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return &m, nil
}

// check enforces per-type rules so handlers see only well-formed input.
func (m *message) check() error {
	bad := func(format string, args ...any) error {
		return protoErr(CodeMalformed, "%s: "+format, append([]any{m.T}, args...)...)
	}
	switch m.T {
	case msgHello:
		if m.V != ProtocolVersion {
			return bad("v: %d is not the supported protocol version %d (broker and agent must run the same strait release)", m.V, ProtocolVersion)
		}
	case msgPublish:
		if m.Seq == 0 {
			return bad("seq: required, from 1")
		}
		if m.Cont && m.Base != 0 {
			return bad("base and cont: exclusive")
		}
		if len(m.Put) > MaxExportsPerFrame || len(m.Del) > MaxExportsPerFrame {
			return bad("put/del: %d/%d exports, at most %d each per frame", len(m.Put), len(m.Del), MaxExportsPerFrame)
		}
		seen := make(map[string]bool, len(m.Put)+len(m.Del))
		for i, e := range m.Put {
			if err := e.Validate(); err != nil {
				return bad("put[%d]: %v", i, err)
			}
			if seen[e.Key()] {
				return bad("put[%d]: %s twice", i, e.Key())
			}
			seen[e.Key()] = true
		}
		for i, k := range m.Del {
			ns, name, ok := cutKey(k)
			if !ok || (Export{Namespace: ns, Name: name}).Validate() != nil {
				return bad("del[%d]: %q is not namespace/name of an export", i, k)
			}
			if seen[k] {
				return bad("del[%d]: %s also put or deleted twice", i, k)
			}
			seen[k] = true
		}
		if m.Gateways != nil {
			if err := checkGateways(*m.Gateways); err != nil {
				return bad("%v", err)
			}
		}
	case msgWelcome, msgSnapshot, msgDelta, msgAck, msgError:
		// Values decoded as json.RawMessage are valid JSON already; a
		// typed export is checked by the key it is stored under.
		for i, e := range m.Entries {
			if e.Key == "" {
				return bad("entries[%d].k: empty", i)
			}
			if e.Export == nil {
				continue
			}
			if len(e.Value) > 0 {
				return bad("entries[%d]: v and x: exclusive", i)
			}
			kind, _, nsName := parseKey(e.Key)
			if kind != kindExport || e.Export.Key() != nsName {
				return bad("entries[%d].x: export %s under key %q", i, e.Export.Key(), e.Key)
			}
		}
	case "":
		return protoErr(CodeMalformed, "frame: t: required")
	default:
		return protoErr(CodeMalformed, "frame: t: %q is not one of hello, publish, welcome, snapshot, delta, ack, error", m.T)
	}
	return nil
}

// MaxGateways bounds a cluster's published gateway list.
const MaxGateways = 256

func checkGateways(gws []Gateway) error {
	if len(gws) > MaxGateways {
		return fmt.Errorf("gateways: %d, at most %d", len(gws), MaxGateways)
	}
	seen := map[string]bool{}
	for i, g := range gws {
		// The catalog's Peer rules for a gateway address, so what the
		// broker accepts is what an agent can apply as a Peer.
		p := catalog.Peer{Metadata: catalog.ObjectMeta{Name: "x"}, Spec: catalog.PeerSpec{Gateways: []string{g.Addr}}}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("gateways[%d].addr: %q: %v", i, g.Addr, err)
		}
		if seen[g.Addr] {
			return fmt.Errorf("gateways[%d].addr: %s twice", i, g.Addr)
		}
		seen[g.Addr] = true
	}
	return nil
}

func cutKey(k string) (ns, name string, ok bool) {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i], k[i+1:], true
		}
	}
	return "", "", false
}
