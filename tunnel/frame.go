package tunnel

import (
	"encoding/binary"
	"fmt"
)

// Wire format of the strait multiplexer, version 1 (ALPN "strait-mux/1").
//
// After the TLS handshake both ends send a sequence of frames; there is no
// other preface. Every frame starts with an 8-byte header, big-endian:
//
//	+--------+--------+-----------------+-----------------------------------+
//	| type 8 | flags 8|    length 16    |            stream ID 32           |
//	+--------+--------+-----------------+-----------------------------------+
//	|                         payload (length bytes)                        |
//
// Stream IDs: the dialing side opens odd IDs, the listening side even IDs,
// each strictly increasing (gaps allowed); ID 0 is the session itself. IDs
// are never reused.
//
// Types (any other type, an unknown flag, a wrong stream ID or a payload of
// the wrong length is a protocol violation: the receiver closes the session):
//
//	0 DATA    stream>0. Payload: stream bytes (may be empty). Flag 0x1 FIN:
//	          the sender will send no more data on this stream.
//	1 OPEN    stream>0, the sender's parity, above every ID it opened before.
//	          Payload: the opaque stream header, at most the receiver's
//	          maximum header size (4096 by default). The sender may follow
//	          with DATA at once: nothing waits for the receiver.
//	2 WINDOW  Payload: uint64, the new absolute limit of bytes the receiver
//	          accepts on the stream (stream>0) or on the whole session (0).
//	          Limits never shrink; a smaller value is ignored.
//	3 RESET   stream>0. Payload: a UTF-8 reason, at most 1024 bytes. Aborts
//	          both directions; also how a receiver refuses a stream.
//	4 PING    stream 0. Payload: 8 opaque bytes. Flag 0x1 ACK: a reply that
//	          echoes the payload of a PING.
//	5 GOAWAY  stream 0. Payload: a UTF-8 reason, at most 1024 bytes. The
//	          sender opens and accepts no more streams and closes soon.
//
// Flow control: every stream starts with a send window of 256 KiB and the
// session with 1 MiB, counted in DATA payload bytes; a receiver raises them
// with WINDOW frames (it announces its real session window right away).
// Sending more than the limit is a protocol violation. DATA for a stream
// that is already gone still counts against the session window; the
// receiver discards it and credits it back. Frames for a stream that was
// never opened are a protocol violation. When a receiver credits is its
// own choice: ours credits the session as data enters a stream's buffer
// (session.go, sessionCredit).
//
// Datagram streams (datagram.go). A stream whose opener's header says so
// (the gateway's stream header version 3, protocol UDP) carries datagrams
// instead of a byte stream, as records in its DATA payload, each:
//
//	+-----------------+-----------------------------------------------+
//	|    length 16    |           datagram (length bytes)             |
//	+-----------------+-----------------------------------------------+
//
// Records may span DATA frames and a frame may hold several; a record of
// length 0 is an empty datagram. FIN after a whole record ends the flow;
// a stream that ends inside a record broke the framing, and the receiver
// resets it. The multiplexer itself does not look into records: flow
// control, FIN and RESET work as on any stream, and a sender drops
// datagrams it cannot queue (bounded per flow) rather than stalling.
const (
	protocolALPN = "strait-mux/1"

	frameHeaderLen  = 8
	maxFramePayload = 1<<16 - 1
	maxReasonLen    = 1024
	// maxHeaderSize is the largest header the protocol can carry.
	maxHeaderSize = maxFramePayload

	initialStreamWindow  = 256 << 10
	initialSessionWindow = 1 << 20

	// dataFrameSize is the largest DATA payload we send: with its header,
	// four full TLS records, so a frame that starts on a record boundary
	// ends on one and most of its payload goes to TLS without a copy
	// (session.writePayload). The writer sends one Write's chunk at a time
	// anyway, so the frame size does not decide how streams interleave.
	dataFrameSize = 64<<10 - frameHeaderLen
)

type frameType uint8

const (
	frameData frameType = iota
	frameOpen
	frameWindow
	frameReset
	framePing
	frameGoAway
)

const (
	flagFIN = 0x1 // DATA
	flagACK = 0x1 // PING
)

func (t frameType) String() string {
	switch t {
	case frameData:
		return "DATA"
	case frameOpen:
		return "OPEN"
	case frameWindow:
		return "WINDOW"
	case frameReset:
		return "RESET"
	case framePing:
		return "PING"
	case frameGoAway:
		return "GOAWAY"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

type frameHeader struct {
	typ    frameType
	flags  uint8
	length uint16
	stream uint32
}

func (h frameHeader) encode(b []byte) {
	b[0] = byte(h.typ)
	b[1] = h.flags
	binary.BigEndian.PutUint16(b[2:], h.length)
	binary.BigEndian.PutUint32(b[4:], h.stream)
}

func decodeFrameHeader(b []byte) frameHeader {
	return frameHeader{
		typ:    frameType(b[0]),
		flags:  b[1],
		length: binary.BigEndian.Uint16(b[2:]),
		stream: binary.BigEndian.Uint32(b[4:]),
	}
}

// validate checks everything about a frame header that does not depend on
// session state. maxHeader is the receiver's maximum OPEN payload.
func (h frameHeader) validate(maxHeader int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s frame on stream %d: %s", ErrProtocol, h.typ, h.stream, fmt.Sprintf(format, args...))
	}
	switch h.typ {
	case frameData:
		if h.flags&^flagFIN != 0 {
			return bad("unknown flags %#x", h.flags)
		}
	case frameOpen:
		if h.flags != 0 {
			return bad("unknown flags %#x", h.flags)
		}
		if int(h.length) > maxHeader {
			return bad("stream header of %d bytes exceeds the maximum %d", h.length, maxHeader)
		}
	case frameWindow:
		if h.flags != 0 {
			return bad("unknown flags %#x", h.flags)
		}
		if h.length != 8 {
			return bad("payload of %d bytes, want 8", h.length)
		}
		return nil // stream 0 allowed
	case frameReset:
		if h.flags != 0 {
			return bad("unknown flags %#x", h.flags)
		}
		if h.length > maxReasonLen {
			return bad("reason of %d bytes exceeds %d", h.length, maxReasonLen)
		}
	case framePing:
		if h.flags&^flagACK != 0 {
			return bad("unknown flags %#x", h.flags)
		}
		if h.length != 8 {
			return bad("payload of %d bytes, want 8", h.length)
		}
		if h.stream != 0 {
			return bad("must be on stream 0")
		}
		return nil
	case frameGoAway:
		if h.flags != 0 {
			return bad("unknown flags %#x", h.flags)
		}
		if h.length > maxReasonLen {
			return bad("reason of %d bytes exceeds %d", h.length, maxReasonLen)
		}
		if h.stream != 0 {
			return bad("must be on stream 0")
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown frame type %d", ErrProtocol, uint8(h.typ))
	}
	if h.stream == 0 {
		return bad("needs a stream ID")
	}
	return nil
}
