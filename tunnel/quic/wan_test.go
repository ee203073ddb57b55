package quic_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/emulator"
	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/quic"
	"github.com/strait-net/strait/tunnel/tunneltest"
)

// TestTransportsOverEmulatedWAN measures single-stream goodput of the TLS
// multiplexer, raw TLS and QUIC between two network namespaces joined by
// strait's userspace link emulator (1 Gbit/s, 5 ms ± 1 ms each way, or
// STRAIT_WAN_DELAY), with and without 0.08 % packet loss. It is an
// experiment, not a unit test: it needs root and STRAIT_WAN_BENCH=1, and
// prints a table.
func TestTransportsOverEmulatedWAN(t *testing.T) {
	if os.Getenv("STRAIT_WAN_BENCH") == "" {
		t.Skip("set STRAIT_WAN_BENCH=1 (needs root): measures transports over an emulated WAN for ~40s")
	}
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	nsA := testenv.Netns(t, testenv.UniqueName("tqa"))
	nsB := testenv.Netns(t, testenv.UniqueName("tqb"))
	dur, delay := 4*time.Second, 5*time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("STRAIT_WAN_DURATION")); err == nil {
		dur = d
	}
	if d, err := time.ParseDuration(os.Getenv("STRAIT_WAN_DELAY")); err == nil {
		delay = d // one way
	}

	type row struct {
		loss      float64
		transport string
		mbps      float64
	}
	var rows []row
	for _, loss := range []float64{0, 0.08} {
		p := emulation.Params{Delay: delay, Jitter: time.Millisecond, Loss: loss, Rate: 1_000_000_000}
		dir := t.TempDir()
		ready := filepath.Join(dir, "ready")
		cfg := emulator.Config{
			Links:     []emulator.Link{{Name: "wan", A: emulator.Endpoint{Netns: nsA, Device: "wa"}, B: emulator.Endpoint{Netns: nsB, Device: "wb"}, AtoB: p, BtoA: p}},
			ReadyFile: ready,
		}
		js, err := cfg.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		cfgPath := filepath.Join(dir, "emulator.json")
		if err := os.WriteFile(cfgPath, js, 0o644); err != nil {
			t.Fatal(err)
		}
		emu := exec.Command(bin, "lab", "emulate", "--config", cfgPath)
		var emuOut strings.Builder
		emu.Stdout, emu.Stderr = &emuOut, &emuOut
		if err := emu.Start(); err != nil {
			t.Fatal(err)
		}
		stopEmu := func() {
			_ = emu.Process.Kill()
			_ = emu.Wait()
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(ready); err == nil {
				break
			}
			if time.Now().After(deadline) {
				stopEmu()
				t.Fatalf("emulator not ready: %s", emuOut.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		testenv.Run(t, "ip", "-n", nsA, "addr", "add", "192.0.2.1/24", "dev", "wa")
		testenv.Run(t, "ip", "-n", nsB, "addr", "add", "192.0.2.2/24", "dev", "wb")
		testenv.Run(t, "ip", "-n", nsA, "link", "set", "wa", "up")
		testenv.Run(t, "ip", "-n", nsB, "link", "set", "wb", "up")

		srv := exec.Command("ip", "netns", "exec", nsB, self, "-test.run=^TestWANHelper$")
		srv.Env = append(os.Environ(), "STRAIT_WAN_ROLE=server")
		var srvOut strings.Builder
		srv.Stdout, srv.Stderr = &srvOut, &srvOut
		if err := srv.Start(); err != nil {
			stopEmu()
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		transports := []string{"mux", "tls", "quic"}
		if v := os.Getenv("STRAIT_WAN_TRANSPORTS"); v != "" {
			transports = strings.Split(v, ",")
		}
		for _, tr := range transports {
			cl := exec.Command("ip", "netns", "exec", nsA, self, "-test.run=^TestWANHelper$", "-test.v")
			cl.Env = append(os.Environ(), "STRAIT_WAN_ROLE=client", "STRAIT_WAN_TRANSPORT="+tr, "STRAIT_WAN_DURATION="+dur.String())
			out, err := cl.CombinedOutput()
			var mbps float64
			if i := strings.Index(string(out), "GOODPUT "); i >= 0 {
				fmt.Sscanf(string(out[i:]), "GOODPUT %f", &mbps)
			}
			if err != nil || mbps == 0 {
				t.Errorf("%s at %.2f%% loss: %v\n%s", tr, loss, err, out)
			}
			rows = append(rows, row{loss, tr, mbps})
		}
		_ = srv.Process.Kill()
		_ = srv.Wait()
		stopEmu()
	}
	t.Logf("single stream, 1 Gbit/s, %v±1ms each way, %v per run:", delay, dur)
	t.Logf("%-8s %-6s %10s", "loss %", "tport", "Mbit/s")
	for _, r := range rows {
		t.Logf("%-8.2f %-6s %10.0f", r.loss, r.transport, r.mbps)
	}
}

// TestWANHelper is the server or client process of the WAN experiment,
// started inside a namespace by TestTransportsOverEmulatedWAN.
func TestWANHelper(t *testing.T) {
	role := os.Getenv("STRAIT_WAN_ROLE")
	if role == "" {
		t.Skip("helper process of TestTransportsOverEmulatedWAN")
	}
	pki := tunneltest.NewPKI(t)
	// Each process has its own throwaway CA: verification is not what is
	// measured, so the client skips it and the server takes any cert.
	ctls := pki.ClientTLS(t, "a")
	ctls.InsecureSkipVerify = true
	stls := pki.ServerTLS(t, "b")
	stls.ClientAuth = tls.RequireAnyClientCert
	mcfg := tunnel.Config{ClientTLS: ctls, ServerTLS: stls}
	// Knobs for experiments with socket options.
	fmt.Sscan(os.Getenv("STRAIT_WAN_SNDBUF"), &mcfg.SendBuffer)
	fmt.Sscan(os.Getenv("STRAIT_WAN_LOWAT"), &mcfg.NotSentLowWater)
	mux, err := tunnel.NewTLS(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	q, err := quic.New(quic.Config{ClientTLS: ctls, ServerTLS: stls})
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{"mux": "192.0.2.2:7001", "quic": "192.0.2.2:7002", "tls": "192.0.2.2:7003"}

	// The server counts what it received and answers with the count.
	reply := func(rw io.ReadWriter) {
		n, _ := io.Copy(io.Discard, rw)
		rw.Write(binary.BigEndian.AppendUint64(nil, uint64(n)))
	}
	if role == "server" {
		for name, tr := range map[string]tunnel.Transport{"mux": mux, "quic": q} {
			ln, err := tr.Listen(addr[name])
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for {
					s, err := ln.Accept(context.Background())
					if err != nil {
						return
					}
					go func() {
						for {
							st, err := s.AcceptStream(context.Background())
							if err != nil {
								return
							}
							go func() { reply(st); st.Close() }()
						}
					}()
				}
			}()
		}
		ln, err := tls.Listen("tcp", addr["tls"], stls)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { reply(c); c.Close() }()
			}
		}()
		select {} // killed by the parent
	}

	dur, _ := time.ParseDuration(os.Getenv("STRAIT_WAN_DURATION"))
	name := os.Getenv("STRAIT_WAN_TRANSPORT")
	ctx, cancel := context.WithTimeout(context.Background(), dur+30*time.Second)
	defer cancel()
	var conn interface {
		io.ReadWriter
		CloseWrite() error
	}
	switch name {
	case "tls":
		c, err := (&tls.Dialer{Config: ctls}).DialContext(ctx, "tcp", addr[name])
		if err != nil {
			t.Fatal(err)
		}
		conn = c.(*tls.Conn)
	default:
		tr := tunnel.Transport(mux)
		if name == "quic" {
			tr = q
		}
		s, err := tr.Dial(ctx, addr[name])
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.OpenStream(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		conn = st
	}
	buf := make([]byte, 256<<10)
	start := time.Now()
	for time.Since(start) < dur {
		if _, err := conn.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	conn.CloseWrite()
	var nb [8]byte
	if _, err := io.ReadFull(conn, nb[:]); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	n := binary.BigEndian.Uint64(nb[:])
	fmt.Printf("GOODPUT %.1f Mbit/s (%d bytes in %v)\n", float64(n)*8/elapsed.Seconds()/1e6, n, elapsed)
}
