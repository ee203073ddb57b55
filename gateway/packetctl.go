package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/internal/dnsname"
)

// The packet mode's control travels on the peers' authenticated TLS
// sessions, as streams whose header is packetHeader instead of a Header
// (docs/packet.md, "The gateway"): a gateway configured for the packet
// mode toward a peer opens one every packetHelloInterval and writes a
// packetHello; the peer answers with a packetAnswer and closes. The
// sending cluster is the session's certificate, never the message's word.
// A gateway too old to know the header resets the stream ("not a strait
// stream header"), which the sender reports as the peer's refusal.
var packetHeader = []byte{'P', 1}

// isPacketHeader reports whether a stream header opens packet-mode control.
func isPacketHeader(h []byte) bool { return bytes.Equal(h, packetHeader) }

// Data-plane modes of a peer (PeerConfig.DataPlane).
const (
	DataPlaneStream = "stream"
	DataPlanePacket = "packet"
)

// packetHello is what a gateway tells a peer about its packet mode: the
// mode it is configured with for that peer, the imports of the peer's
// exports whose packets it will send (the exporting gateway keys its
// exports map by these clusterset addresses), and its sources, which name
// the namespace and labels of a client address for the peer's ingress
// policies (the packet carries only the client's address).
type packetHello struct {
	Mode    string          `json:"mode"`
	Imports []packetImport  `json:"imports,omitempty"`
	Sources []packetSourceW `json:"sources,omitempty"`
}

// packetImport is one clusterset address, port and protocol of an import,
// and the export (namespace/name) it reaches.
type packetImport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Address   string `json:"address"`
	Port      uint16 `json:"port"`
	Protocol  string `json:"protocol"`
}

// packetSourceW is a Source on the wire.
type packetSourceW struct {
	CIDR      string            `json:"cidr"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// packetAnswer is the peer's mode for the asking gateway and, when it is
// not the packet mode, why.
type packetAnswer struct {
	Mode   string `json:"mode"`
	Reason string `json:"reason,omitempty"`
}

// Bounds of control messages: a hello lists every import of one peer's
// exports, so it may be large, but never unbounded.
const (
	maxPacketHello   = 8 << 20
	maxPacketAnswer  = 4 << 10
	maxPacketImports = 100_000
	maxPacketSources = 1024
	// maxPacketWorkloadBytes bounds the Workloads' share of a hello, about
	// their JSON size, so that they leave the imports most of
	// maxPacketHello.
	maxPacketWorkloadBytes = 1 << 20
)

func checkMode(m string) error {
	if m != DataPlaneStream && m != DataPlanePacket {
		return fmt.Errorf("mode %q: want %s or %s", m, DataPlaneStream, DataPlanePacket)
	}
	return nil
}

// decodeStrict reads one JSON value of at most max bytes from r, refusing
// unknown fields and trailing data.
func decodeStrict(r io.Reader, max int64, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return err
	}
	if int64(len(b)) > max {
		return fmt.Errorf("more than %d bytes", max)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the message")
	}
	return nil
}

// parsePacketHello decodes and validates a hello, naming the bad field.
func parsePacketHello(r io.Reader) (*packetHello, error) {
	var h packetHello
	if err := decodeStrict(r, maxPacketHello, &h); err != nil {
		return nil, fmt.Errorf("packet hello: %w", err)
	}
	if err := h.validate(); err != nil {
		return nil, fmt.Errorf("packet hello: %w", err)
	}
	return &h, nil
}

func (h *packetHello) validate() error {
	if err := checkMode(h.Mode); err != nil {
		return err
	}
	if len(h.Imports) > maxPacketImports {
		return fmt.Errorf("imports: %d, at most %d", len(h.Imports), maxPacketImports)
	}
	if len(h.Sources) > maxPacketSources {
		return fmt.Errorf("sources: %d, at most %d", len(h.Sources), maxPacketSources)
	}
	for i, im := range h.Imports {
		if !dnsname.IsLabel(im.Namespace) || !dnsname.IsLabel(im.Name) {
			return fmt.Errorf("imports[%d]: %q/%q: namespace and name must be DNS labels", i, im.Namespace, im.Name)
		}
		a, err := netip.ParseAddr(im.Address)
		if err != nil || !a.Is4() {
			return fmt.Errorf("imports[%d].address %q: want an IPv4 address", i, im.Address)
		}
		if im.Port == 0 {
			return fmt.Errorf("imports[%d].port: 0, want 1..65535", i)
		}
		if im.Protocol != string(catalog.TCP) && im.Protocol != string(catalog.UDP) {
			return fmt.Errorf("imports[%d].protocol %q: want TCP or UDP", i, im.Protocol)
		}
	}
	for i, s := range h.Sources {
		p, err := netip.ParsePrefix(s.CIDR)
		if err != nil || p != p.Masked() {
			return fmt.Errorf("sources[%d].cidr %q: want a masked CIDR prefix", i, s.CIDR)
		}
		if s.Namespace != "" && !dnsname.IsLabel(s.Namespace) {
			return fmt.Errorf("sources[%d].namespace %q: must be a DNS label", i, s.Namespace)
		}
		if len(s.Labels) > maxLabels {
			return fmt.Errorf("sources[%d].labels: %d, at most %d", i, len(s.Labels), maxLabels)
		}
		for k, v := range s.Labels {
			if k == "" || len(k) > maxLabelKey || len(v) > maxLabelValue {
				return fmt.Errorf("sources[%d].labels: key %q or its value out of bounds", i, k)
			}
		}
	}
	return nil
}

// parsePacketAnswer decodes and validates an answer.
func parsePacketAnswer(r io.Reader) (*packetAnswer, error) {
	var a packetAnswer
	if err := decodeStrict(r, maxPacketAnswer, &a); err != nil {
		return nil, fmt.Errorf("packet answer: %w", err)
	}
	if err := checkMode(a.Mode); err != nil {
		return nil, fmt.Errorf("packet answer: %w", err)
	}
	if strings.ContainsAny(a.Reason, "\n\r") || len(a.Reason) > 1024 {
		return nil, errors.New("packet answer: reason: one line of at most 1024 bytes")
	}
	return &a, nil
}

// helloSources is what a hello offers as sources: the Workloads' exact
// addresses ahead of the configured sources, as the local policy orders
// them. A hello carries at most maxPacketSources, and the configured
// sources always go in; Workloads past the remaining room, or whose labels
// exceed the hello's bounds (the peer would refuse the whole hello), or
// past maxPacketWorkloadBytes of them, are left out and returned as
// unsent: the peer's ingress policy then sees those addresses as the
// configured source holding them (docs/packet.md, "Workloads").
func helloSources(workloads, configured []packetSourceW) (srcs []packetSourceW, unsent int) {
	room := maxPacketSources - len(configured)
	budget := maxPacketWorkloadBytes
	for _, w := range workloads {
		if pr, err := netip.ParsePrefix(w.CIDR); err != nil || !pr.Addr().Is4() {
			continue // the packet mode carries IPv4 only: nothing to tell
		}
		size := len(w.CIDR) + len(w.Namespace) + 40
		fits := len(w.Labels) <= maxLabels
		for k, v := range w.Labels {
			size += len(k) + len(v) + 8
			fits = fits && k != "" && len(k) <= maxLabelKey && len(v) <= maxLabelValue
		}
		if !fits || room <= 0 || size > budget {
			unsent++
			continue
		}
		room--
		budget -= size
		srcs = append(srcs, w)
	}
	return append(srcs, configured...), unsent
}

// sourcesOf puts a gateway's sources on the wire, in their order.
func sourcesOf(srcs []Source) []packetSourceW {
	out := make([]packetSourceW, 0, len(srcs))
	for _, s := range srcs {
		out = append(out, packetSourceW{CIDR: s.prefix.String(), Namespace: s.Namespace, Labels: s.Labels})
	}
	return out
}
