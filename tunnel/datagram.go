package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Datagram streams carry UDP datagrams over a Stream (frame.go, "Datagram
// streams"): each datagram is a record of a 16-bit big-endian length and
// that many bytes. Records ride the stream's flow control and ordering; a
// stream carries one flow (one client address and port to one import
// address), so a datagram that cannot wait is dropped by the sender before
// it becomes a record, never inside the stream.

// MaxDatagram is the largest datagram a record holds: the length field's
// maximum, above any UDP payload (65507 bytes over IPv4, 65527 over IPv6).
const MaxDatagram = 1<<16 - 1

// datagramHeaderLen is the size of a record's length prefix.
const datagramHeaderLen = 2

// ErrDatagramTooLarge is returned by AppendDatagram for a datagram longer
// than MaxDatagram.
var ErrDatagramTooLarge = errors.New("datagram too large")

// AppendDatagram appends p as one record to b.
func AppendDatagram(b, p []byte) ([]byte, error) {
	if len(p) > MaxDatagram {
		return b, fmt.Errorf("%w: %d bytes, at most %d", ErrDatagramTooLarge, len(p), MaxDatagram)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
	return append(b, p...), nil
}

// DatagramRecordLen is the size of p's record: what a bounded queue of
// records counts.
func DatagramRecordLen(p []byte) int { return datagramHeaderLen + len(p) }

// DatagramReader splits a datagram stream into datagrams. It reads in
// large chunks, so a burst of small datagrams costs one Read.
type DatagramReader struct {
	r   io.Reader
	buf []byte // buf[off:end] is read and not yet returned
	off int
	end int
}

// The reader's buffer starts small, as most flows carry small datagrams
// (a gateway holds thousands of flows), and grows to fit a larger record.
const datagramReadSize = 4 << 10

// NewDatagramReader returns a reader of the records of r.
func NewDatagramReader(r io.Reader) *DatagramReader {
	return &DatagramReader{r: r, buf: make([]byte, datagramReadSize)}
}

// Next returns the next datagram; the slice is valid until the next call.
// At the end of the stream it returns io.EOF after whole records and
// io.ErrUnexpectedEOF inside one (the sender broke the framing or the
// stream was cut); other errors are the underlying reader's.
func (d *DatagramReader) Next() ([]byte, error) {
	if err := d.fill(datagramHeaderLen); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(d.buf[d.off:]))
	if err := d.fill(datagramHeaderLen + n); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	p := d.buf[d.off+datagramHeaderLen : d.off+datagramHeaderLen+n]
	d.off += datagramHeaderLen + n
	return p, nil
}

// Buffered reports whether a whole record is buffered, so that Next will
// return it without reading: a forwarder flushes what it batched when
// this turns false.
func (d *DatagramReader) Buffered() bool {
	if d.end-d.off < datagramHeaderLen {
		return false
	}
	return d.end-d.off >= datagramHeaderLen+int(binary.BigEndian.Uint16(d.buf[d.off:]))
}

// fill reads until n bytes are buffered. io.EOF means the stream ended
// with nothing of the record read, io.ErrUnexpectedEOF part of it.
func (d *DatagramReader) fill(n int) error {
	if d.end-d.off >= n {
		return nil
	}
	if n > len(d.buf) {
		buf := make([]byte, max(n, 2*len(d.buf)))
		d.end = copy(buf, d.buf[d.off:d.end])
		d.buf, d.off = buf, 0
	}
	if d.off > 0 {
		d.end = copy(d.buf, d.buf[d.off:d.end])
		d.off = 0
	}
	for d.end < n {
		m, err := d.r.Read(d.buf[d.end:])
		d.end += m
		if d.end >= n {
			return nil
		}
		if err != nil {
			if err == io.EOF && d.end > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}
