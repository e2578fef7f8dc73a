package e2e

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// tcpOnly skips a test that plays a peer over raw TCP sockets.
func tcpOnly(t *testing.T) {
	t.Helper()
	if suite.transport != "tcp" {
		t.Skipf("plays a raw TCP peer; the suite runs over %s", suite.transport)
	}
}

// silentConns opens n TCP connections to addr that stay silent: with
// params, each sends a valid rdmapipe proposal first (so that it passes
// the transport's handshake and waits in the engine's). They are closed at
// the end of the test.
func silentConns(t *testing.T, addr string, n int, params bool) {
	t.Helper()
	proposal, _ := conn.NewParams(1<<20, 4).MarshalBinary()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if params {
			if _, err := c.Write(proposal); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSilentConnections holds more silent connections open on a keyed
// rdmarecv -k than it handshakes with at once, of both kinds, and checks
// that a real sender still gets its stream through while they are open.
// (Handshakes used to be served one at a time, 10 s each.)
func TestSilentConnections(t *testing.T) {
	t.Parallel()
	tcpOnly(t)
	port := testutil.FreePort(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("silent-connections-key-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out testutil.Buffer
	r := recv(t, port, &out, "-k", "-v", "--key-file", keyFile)
	r.waitStderr(30*time.Second, listening)
	addr := net.JoinHostPort(suite.host, itoa(int64(port)))
	silentConns(t, addr, 3, false)
	silentConns(t, addr, 9, true)
	in := bytes.Repeat([]byte("through the crowd\n"), 1000)
	s := start(t, "rdmasend", bytes.NewReader(in), io.Discard, append(flags(port, "--key-file", keyFile), suite.host)...)
	code, stderr := s.wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 0, "")
	// rdmarecv wrote the stream before rdmasend exited; the test reads it
	// from rdmarecv's stdout pipe in its own time.
	testutil.WaitFor(t, 30*time.Second, "the receiver's output", func() bool { return len(out.String()) >= len(in) })
	if got := out.String(); got != string(in) {
		t.Errorf("the receiver wrote %d bytes, want %d", len(got), len(in))
	}
}

// refusedFlood sends addr, from the address from, a proposal of another
// protocol version or garbage in turn, one connection every 10 ms, each
// closed at once, until the test ends.
func refusedFlood(t *testing.T, addr, from string) {
	t.Helper()
	p := conn.NewParams(1<<20, 4)
	p.Version = conn.Version + 1
	old, _ := p.MarshalBinary()
	garbage := bytes.Repeat([]byte{0xa5}, len(old))
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: time.Second}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if c, err := d.Dial("tcp", addr); err == nil {
				if i%2 == 0 {
					c.Write(old)
				} else {
					c.Write(garbage)
				}
				c.Close()
			}
		}
	}()
}

// TestRefusedFlood is issue 42's case: while proposals the receiver
// refuses (another version, garbage) arrive 100 a second, from another
// address or from the sender's own, a keyed sender with --wait gets its
// stream through exactly. (Each refusal used to pause the accept loop for
// 100 ms, so that real senders waited behind the flood for good.)
func TestRefusedFlood(t *testing.T) {
	tcpOnly(t)
	for _, from := range []string{"127.0.0.2", suite.host} {
		t.Run("from "+from, func(t *testing.T) {
			t.Parallel()
			port := testutil.FreePort(t)
			keyFile := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(keyFile, []byte("refused-flood-key-0123456789abcdef"), 0o600); err != nil {
				t.Fatal(err)
			}
			var out testutil.Buffer
			r := recv(t, port, &out, "-k", "-v", "--key-file", keyFile)
			r.waitStderr(30*time.Second, listening)
			refusedFlood(t, net.JoinHostPort(suite.host, itoa(int64(port))), from)
			r.waitStderr(30*time.Second, "refused a connection")
			in := bytes.Repeat([]byte("past the refused\n"), 1<<16)
			s := start(t, "rdmasend", bytes.NewReader(in), io.Discard, append(flags(port, "--key-file", keyFile, "--wait", "20s"), suite.host)...)
			code, stderr := s.wait(60 * time.Second)
			expect(t, "rdmasend", code, stderr, 0, "")
			testutil.WaitFor(t, 30*time.Second, "the receiver's output", func() bool { return len(out.String()) >= len(in) })
			if got := out.String(); got != string(in) {
				t.Errorf("the receiver wrote %d bytes, want %d", len(got), len(in))
			}
		})
	}
}

// TestNotARdmapipeReceiver points rdmasend at servers that are not
// rdmapipe: it must say so and exit 3 within its --timeout, not hang.
func TestNotARdmapipeReceiver(t *testing.T) {
	t.Parallel()
	tcpOnly(t)
	cases := []struct {
		name   string
		answer []byte // nil: say nothing
		says   string
	}{
		{"silent", nil, "no rdmapipe handshake answer"},
		{"web server", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), "not an rdmapipe receiver"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", net.JoinHostPort(suite.host, "0"))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					defer c.Close()
					if tc.answer != nil {
						c.Write(tc.answer)
					}
				}
			}()
			port := l.Addr().(*net.TCPAddr).Port
			s := start(t, "rdmasend", strings.NewReader("x"), io.Discard, append(flags(port, "--timeout", "2s"), suite.host)...)
			code, stderr := s.wait(30 * time.Second)
			expect(t, "rdmasend", code, stderr, 3, tc.says)
		})
	}
}

// TestKeepListeningStopsOnFailure is issue 30's case: with -k and one
// output, a sender killed after 1 MiB ends the receiver with that
// failure's exit code, so that a good stream sent after it (and the
// SIGTERM after that) can never leave the truncated stream and the good
// one in the output, one after the other, under an exit 0.
func TestKeepListeningStopsOnFailure(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	out := filepath.Join(t.TempDir(), "output")
	r := recv(t, port, createFile(t, out), "-k", "-v")
	r.waitStderr(30*time.Second, listening)

	doomed, in := slowInput(t, port)
	in.Write(bytes.Repeat([]byte{'x'}, 1<<20))
	testutil.WaitFor(t, 60*time.Second, "the first MiB", func() bool { return fileSize(out) == 1<<20 })
	doomed.cmd.Process.Kill()
	testutil.WaitFor(t, 60*time.Second, "the receiver to end the failed stream", func() bool {
		return r.exited() || strings.Contains(r.stderr.String(), "waiting for the next sender")
	})

	good := start(t, "rdmasend", bytes.NewReader(bytes.Repeat([]byte{'y'}, 1<<20)), io.Discard, append(flags(port), suite.host)...)
	if code, stderr := good.wait(60 * time.Second); code == 0 {
		t.Errorf("the good sender after the failed stream exited 0 (stderr %q): rdmarecv -k served it", stderr)
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	code, stderr := r.wait(30 * time.Second)
	expect(t, "rdmarecv -k", code, stderr, 4, "")
	if b, _ := os.ReadFile(out); bytes.IndexByte(b, 'y') >= 0 || len(b) > 1<<20 {
		t.Errorf("the output holds %d bytes, %d of them the good stream's: the failed stream and the next were mixed", len(b), bytes.Count(b, []byte{'y'}))
	}
}

// TestProgressNeverOverstates sends an empty input with --size 3G: the
// bar must end where the stream really ended, not at 100%.
func TestProgressNeverOverstates(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	r := recv(t, port, io.Discard)
	s := send(t, port, strings.NewReader(""), "-p", "--size", "3G")
	code, stderr := s.wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 0, "")
	if strings.Contains(stderr, "100%") || strings.Contains(stderr, "3.2/3.2 GB") {
		t.Errorf("the progress bar claims bytes that were never sent:\n%q", stderr)
	}
	if code, stderr := r.wait(30 * time.Second); code != 0 {
		t.Errorf("rdmarecv exited %d: %s", code, stderr)
	}
}

// TestIPv6Brackets sends to "[::1]", which used to become "[[::1]]:18800".
func TestIPv6Brackets(t *testing.T) {
	t.Parallel()
	tcpOnly(t)
	if l, err := net.Listen("tcp", "[::1]:0"); err != nil {
		testutil.Unmet(t, "no IPv6 loopback: %v", err)
	} else {
		l.Close()
	}
	port := testutil.FreePort(t)
	r := start(t, "rdmarecv", nil, io.Discard, "--transport", "tcp", "--port", itoa(int64(port)), "--bind", "::1", "-v")
	r.waitStderr(30*time.Second, listening)
	s := start(t, "rdmasend", strings.NewReader("six"), io.Discard, "--transport", "tcp", "--port", itoa(int64(port)), "[::1]")
	code, stderr := s.wait(60 * time.Second)
	expect(t, "rdmasend", code, stderr, 0, "")
}

// TestSync: --sync confirms a stream written to a file, and refuses a
// pipe, where it could not mean "on disk".
func TestSync(t *testing.T) {
	t.Parallel()
	in, want := randomFile(t, 3<<20, 8)
	port := testutil.FreePort(t)
	out := filepath.Join(t.TempDir(), "output")
	r := recv(t, port, createFile(t, out), "--sync")
	s := send(t, port, openFile(t, in))
	code, stderr := s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0, "")
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv --sync", code, stderr, 0, "")
	if got, n := fileSum(t, out); got != want {
		t.Fatalf("the file holds %d bytes that differ from the input", n)
	}

	var piped bytes.Buffer
	p := recv(t, testutil.FreePort(t), &piped, "--sync")
	code, stderr = p.wait(30 * time.Second)
	expect(t, "rdmarecv --sync | ...", code, stderr, 2, "--sync needs standard output to be a file")
}
