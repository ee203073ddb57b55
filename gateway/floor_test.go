package gateway_test

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	endian "encoding/binary"
	"fmt"
	"net"
	"testing"
)

// BenchmarkKeepAliveFloor puts a number on what any pair of encrypting
// gateways costs on this machine: the keep-alive echo of
// BenchmarkKeepAliveEcho directly, through the smallest relay pair that does
// the same work as strait's (the client's connection ends at relay b, which
// seals 16 KiB AES-128-GCM records onto one TCP connection to relay a, which
// opens them and writes to the echo server, and back: three TCP hops and two
// AEAD passes per direction), and through the gateways. The relay has no
// framing, no multiplexing, no flow control and no goroutine handoffs: one
// goroutine per direction per relay, 256 KiB reads, records opened in place.
// gateways/relay is how far strait is from that floor; relay/direct is the
// floor's own price.
func BenchmarkKeepAliveFloor(b *testing.B) {
	direct := echoServer(b)
	relayed := startRelayPair(b, direct)
	gateways := startPair(b).importAddr
	for _, size := range []int{60, 1 << 10, 10 << 10, 100 << 10, 1 << 20} {
		for _, path := range []struct{ name, addr string }{{"direct", direct}, {"relay", relayed}, {"gateways", gateways}} {
			b.Run(fmt.Sprintf("%dB/%s", size, path.name), func(b *testing.B) {
				keepAliveLoop(b, path.addr, size)
			})
		}
	}
}

// startRelayPair returns the address of relay b, which carries connections
// over relay a to target.
func startRelayPair(tb testing.TB, target string) string {
	key := make([]byte, 16)
	block, err := aes.NewCipher(key)
	if err != nil {
		tb.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		tb.Fatal(err)
	}
	// Relay a: sealed records in, plaintext to the target.
	a := relayListener(tb, func(in *net.TCPConn) {
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			return
		}
		go openRecords(aead, in, out.(*net.TCPConn))
		sealRecords(aead, out.(*net.TCPConn), in)
	})
	// Relay b: the client's plaintext in, sealed records to relay a.
	return relayListener(tb, func(in *net.TCPConn) {
		out, err := net.Dial("tcp", a)
		if err != nil {
			in.Close()
			return
		}
		go sealRecords(aead, in, out.(*net.TCPConn))
		openRecords(aead, out.(*net.TCPConn), in)
	})
}

// relayListener accepts TCP connections on loopback and serves each in
// its own goroutine until tb ends.
func relayListener(tb testing.TB, serve func(*net.TCPConn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c.(*net.TCPConn))
		}
	}()
	return ln.Addr().String()
}

const (
	floorRecord = 16 << 10 // TLS's largest plaintext record
	floorHeader = 5        // length and type, as TLS's record header
)

// sealRecords reads plaintext from src and writes it to dst as records:
// a header, then the ciphertext and tag, all records of one read in one
// write(2), as strait's record batcher does.
func sealRecords(aead cipher.AEAD, src, dst *net.TCPConn) {
	defer dst.CloseWrite()
	buf := make([]byte, 256<<10)
	out := make([]byte, 0, len(buf)+(len(buf)/floorRecord+1)*(floorHeader+aead.Overhead()))
	nonce := make([]byte, aead.NonceSize())
	var seq uint64
	for {
		n, err := src.Read(buf)
		out = out[:0]
		for p := buf[:n]; len(p) > 0; {
			k := min(len(p), floorRecord)
			var h [floorHeader]byte
			endian.BigEndian.PutUint32(h[1:], uint32(k+aead.Overhead()))
			out = append(out, h[:]...)
			seq++
			endian.BigEndian.PutUint64(nonce[4:], seq)
			out = aead.Seal(out, nonce, p[:k], nil)
			p = p[k:]
		}
		if len(out) > 0 {
			if _, werr := dst.Write(out); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// openRecords reads records from src, opens them in place in the read
// buffer and writes the plaintext of all complete records buffered with one
// writev(2).
func openRecords(aead cipher.AEAD, src, dst *net.TCPConn) {
	defer dst.CloseWrite()
	r := bufio.NewReaderSize(src, 256<<10)
	nonce := make([]byte, aead.NonceSize())
	var seq uint64
	var plain net.Buffers
	for {
		// Wait for one whole record, then take every whole one buffered.
		h, err := r.Peek(floorHeader)
		if err != nil {
			return
		}
		if _, err := r.Peek(floorHeader + int(endian.BigEndian.Uint32(h[1:]))); err != nil {
			return
		}
		all, _ := r.Peek(r.Buffered())
		plain = plain[:0]
		used := 0
		for len(all)-used >= floorHeader {
			n := int(endian.BigEndian.Uint32(all[used+1:]))
			if len(all)-used < floorHeader+n {
				break
			}
			rec := all[used+floorHeader : used+floorHeader+n]
			seq++
			endian.BigEndian.PutUint64(nonce[4:], seq)
			p, err := aead.Open(rec[:0], nonce, rec, nil)
			if err != nil {
				return
			}
			plain = append(plain, p)
			used += floorHeader + n
		}
		bufs := plain
		_, werr := bufs.WriteTo(dst)
		_, _ = r.Discard(used)
		if werr != nil {
			return
		}
	}
}
