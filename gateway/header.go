package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Header travels in front of a stream's first bytes: which export the
// stream is for, and who opened it inside the sending cluster. The sending
// cluster itself is not in the header — the receiver takes it from the
// session's authenticated certificate, so a peer cannot claim to be another
// cluster. Namespace and labels are the sending gateway's word; that gateway
// is trusted for its own cluster.
type Header struct {
	Namespace string // export namespace
	Export    string // export name
	// Port is the import's port the client connected to, which the
	// exporting gateway maps to that port's target; 0 when the sender did
	// not say (version 1).
	Port uint16
	// Datagram marks a stream that carries one UDP flow of the port as
	// datagram records (tunnel.DatagramReader), version 3; false is TCP.
	Datagram        bool
	SourceNamespace string
	SourceLabels    map[string]string
}

// Wire format (all lengths and numbers are unsigned varints):
//
//	'S' version
//	len namespace, len export, len source namespace   (each followed by its bytes)
//	version 2 and 3: port, 1..65535
//	version 3 only: IP protocol number, 17 (UDP)
//	count of labels, then per label: len key, key, len value, value
//
// Labels are sorted by key so equal headers encode to equal bytes.
// Version 2 added the port, so that each port of a multi-port export
// reaches its own target. Marshal writes version 1 when Port is 0, which is
// what a version-1 gateway sends, and ParseHeader reads both; a version-1
// gateway refuses version 2 with a reason naming the version, which the
// sending gateway logs. Version 3 added the protocol, for UDP flows
// carried as datagram streams; Marshal writes it only for those, so TCP
// streams stay readable by version-2 gateways, which refuse UDP flows
// naming the version.
const (
	headerMagic   = 'S'
	headerV1      = 1
	headerV2      = 2
	headerVersion = 3
	// protoUDP is UDP's IP protocol number, the only one version 3 carries.
	protoUDP      = 17
	maxNameLen    = 253
	maxLabels     = 64
	maxLabelKey   = 317 // a DNS-subdomain prefix, '/', a 63-byte name
	maxLabelValue = 63
)

// ErrBadHeader is wrapped by every ParseHeader error.
var ErrBadHeader = errors.New("bad stream header")

// Marshal encodes h.
func (h Header) Marshal() []byte {
	b := make([]byte, 0, 16+len(h.Namespace)+len(h.Export)+len(h.SourceNamespace)+32*len(h.SourceLabels))
	version := byte(headerV2)
	switch {
	case h.Datagram:
		version = headerVersion
	case h.Port == 0:
		version = headerV1
	}
	b = append(b, headerMagic, version)
	b = appendString(b, h.Namespace)
	b = appendString(b, h.Export)
	b = appendString(b, h.SourceNamespace)
	if version >= 2 {
		b = binary.AppendUvarint(b, uint64(h.Port))
	}
	if version >= 3 {
		b = binary.AppendUvarint(b, protoUDP)
	}
	keys := make([]string, 0, len(h.SourceLabels))
	for k := range h.SourceLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, h.SourceLabels[k])
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ParseHeader decodes a header, rejecting anything Marshal would not
// produce: a peer sending one is broken or hostile, and the stream is
// refused.
func ParseHeader(b []byte) (Header, error) {
	d := decoder{b: b}
	if len(b) < 2 || b[0] != headerMagic {
		return Header{}, fmt.Errorf("%w: not a strait stream header", ErrBadHeader)
	}
	version := b[1]
	if version < headerV1 || version > headerVersion {
		return Header{}, fmt.Errorf("%w: version %d, this gateway speaks %d to %d", ErrBadHeader, version, headerV1, headerVersion)
	}
	d.b = b[2:]
	var h Header
	h.Namespace = d.str("namespace", maxNameLen)
	h.Export = d.str("export", maxNameLen)
	h.SourceNamespace = d.str("source namespace", maxNameLen)
	if version >= 2 {
		// Port 0 has the version-1 encoding; here it would be a second one.
		if p := d.uvarint("port"); d.err == nil && (p == 0 || p > 65535) {
			d.fail("port %d is not in 1..65535", p)
		} else {
			h.Port = uint16(p)
		}
	}
	if version >= 3 {
		// TCP has the version-2 encoding; here it would be a second one.
		if p := d.uvarint("protocol"); d.err == nil && p != protoUDP {
			d.fail("protocol %d: want %d (UDP)", p, protoUDP)
		}
		h.Datagram = true
	}
	n := d.uvarint("label count")
	if d.err == nil && n > maxLabels {
		d.fail("%d labels, at most %d", n, maxLabels)
	}
	if d.err == nil && n > 0 {
		h.SourceLabels = make(map[string]string, n)
		prev := ""
		for i := uint64(0); i < n && d.err == nil; i++ {
			k := d.str("label key", maxLabelKey)
			v := d.str("label value", maxLabelValue)
			if d.err == nil && (k == "" || k <= prev) {
				d.fail("label keys empty, unsorted or repeated at %q", k)
			}
			prev = k
			h.SourceLabels[k] = v
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err == nil && (h.Namespace == "" || h.Export == "") {
		d.fail("no export named")
	}
	if d.err != nil {
		return Header{}, d.err
	}
	return h, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadHeader, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated %s", what)
		return 0
	}
	// A trailing zero byte makes the same value one byte longer than the
	// shortest encoding, which Marshal never writes.
	if n > 1 && d.b[n-1] == 0 {
		d.fail("over-long varint for %s", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(what string, max int) string {
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if n > uint64(max) {
		d.fail("%s of %d bytes, at most %d", what, n, max)
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("truncated %s", what)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
