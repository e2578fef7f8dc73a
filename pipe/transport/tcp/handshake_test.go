package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

var (
	proposal = conn.NewParams(8192, 8)
	local    = conn.NewParams(4096, 4)
)

// TestAddresses connects over IPv4, IPv6 and a host name.
func TestAddresses(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, listen, host string }{
		{"ipv4", "127.0.0.1:0", "127.0.0.1"},
		{"ipv6", "[::1]:0", "::1"},
		{"hostname", "127.0.0.1:0", "localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := Listen(t.Context(), tt.listen, local)
			if err != nil {
				testutil.Unmet(t, "no %s loopback here: %v", tt.name, err)
			}
			defer l.Close()
			_, port, _ := net.SplitHostPort(l.Addr())
			s, r, err := dialAccept(t, l, net.JoinHostPort(tt.host, port), proposal)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			defer r.Close()
			if got := s.Info().Remote; got != l.Addr() {
				t.Errorf("sender's Remote is %s, want %s", got, l.Addr())
			}
			if s.Info().Transport != "tcp" || r.Info().Remote != s.Info().Local {
				t.Errorf("sender %+v and receiver %+v disagree", s.Info(), r.Info())
			}
		})
	}
}

// TestVersionMismatch checks that both sides report another protocol
// version, and that the listener goes on accepting.
func TestVersionMismatch(t *testing.T) {
	t.Parallel()
	l, err := Listen(t.Context(), "127.0.0.1:0", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept(t.Context())
		accepted <- err
	}()
	p := proposal
	p.Version = conn.Version + 1
	_, err = Dial(t.Context(), l.Addr(), p)
	if conn.KindOf(err) != conn.KindSetup || !strings.Contains(err.Error(), fmt.Sprintf("the receiver speaks protocol version %d and this sender %d", conn.Version, conn.Version+1)) {
		t.Errorf("dial: %v", err)
	}
	err = <-accepted
	if conn.KindOf(err) != conn.KindSetup || !strings.Contains(err.Error(), fmt.Sprintf("peer speaks protocol version %d", conn.Version+1)) {
		t.Errorf("accept: %v", err)
	}
	s, r, err := dialAccept(t, l, l.Addr(), proposal)
	if err != nil {
		t.Fatalf("the listener refused a good sender after a bad one: %v", err)
	}
	_ = s.Close()
	_ = r.Close()
}

// TestAcceptSkipsStrangers checks that connections that are not rdmapipe
// senders neither hold up the sender behind them nor reach Accept. The
// handshake timeout is an hour, so a listener that handshakes one
// connection after another would hang here. Strangers that send garbage or
// hang up are closed at once; silent ones when the listener closes.
func TestAcceptSkipsStrangers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		strangers int
		talk      func(net.Conn)
		atOnce    bool // closed by the listener before Close
	}{
		{"garbage", 1, func(c net.Conn) { _, _ = io.WriteString(c, "GET / HTTP/1.0\r\n\r\n") }, true},
		{"hang up", 1, func(c net.Conn) { _ = c.(*net.TCPConn).CloseWrite() }, true},
		{"short", 1, func(c net.Conn) { _, _ = io.WriteString(c, "RDPP") }, false},
		{"silent", 1, func(net.Conn) {}, false},
		{"three silent", 3, func(net.Conn) {}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := ListenConfig{HandshakeTimeout: time.Hour}.Listen(t.Context(), "127.0.0.1:0", local)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var strangers []net.Conn
			for range tt.strangers {
				c, err := net.Dial("tcp", l.Addr())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				tt.talk(c)
				strangers = append(strangers, c)
			}
			s, r, err := dialAccept(t, l, l.Addr(), proposal)
			if err != nil {
				t.Fatalf("the sender behind the strangers: %v", err)
			}
			if s.Info().Local != r.Info().Remote {
				t.Errorf("Accept returned %s, want the sender %s", r.Info().Remote, s.Info().Local)
			}
			_ = s.Close()
			_ = r.Close()
			if tt.atOnce {
				for _, c := range strangers {
					assertClosed(t, c)
				}
			}
			if err := l.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			for _, c := range strangers {
				assertClosed(t, c)
			}
		})
	}
}

// assertClosed checks that the listener closed c without writing to it.
func assertClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 64))
	var ne net.Error
	switch {
	case n > 0:
		t.Errorf("the listener wrote %d bytes to %s", n, c.LocalAddr())
	case errors.As(err, &ne) && ne.Timeout():
		t.Errorf("the connection from %s is still open", c.LocalAddr())
	case err == nil:
		t.Errorf("read from %s: no error and no bytes", c.LocalAddr())
	}
}

// TestHandshakeTimeout checks that the listener closes a connection that
// does not complete its proposal within the handshake timeout.
func TestHandshakeTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		talk func(net.Conn)
	}{
		{"silent", func(net.Conn) {}},
		{"short", func(c net.Conn) { _, _ = io.WriteString(c, "RDPP\x02\x00") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := ListenConfig{HandshakeTimeout: 50 * time.Millisecond}.Listen(t.Context(), "127.0.0.1:0", local)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			c, err := net.Dial("tcp", l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tt.talk(c)
			assertClosed(t, c)
			testutil.WaitFor(t, 10*time.Second, "the handshake to end", func() bool { return l.inProgress() == 0 })
		})
	}
}

// TestHandshakeFlood floods a listener with silent connections from one
// host (127.0.0.1) while two senders are in their handshake: one from the
// same host that sent its proposal and waits for Accept (progressed), and
// one from another host (127.0.0.2) that has sent half its proposal. The
// flood recycles its own host's slots, oldest first; neither sender is
// evicted, and both are accepted.
func TestHandshakeFlood(t *testing.T) {
	t.Parallel()
	l, err := ListenConfig{HandshakeTimeout: time.Hour}.Listen(t.Context(), "127.0.0.1:0", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	slow, err := d.DialContext(t.Context(), "tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	b, _ := proposal.MarshalBinary()
	if _, err := slow.Write(b[:len(b)/2]); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the slow sender's handshake to start", func() bool { return l.inProgress() == 1 })
	progressed, err := Dial(t.Context(), l.Addr(), proposal)
	if err != nil {
		t.Fatal(err)
	}
	defer progressed.Close()
	flood := make([]net.Conn, 4*handshakes().Full)
	for i := range flood {
		if flood[i], err = net.Dial("tcp", l.Addr()); err != nil {
			t.Fatal(err)
		}
		defer flood[i].Close()
		if i < handshakes().PerSource {
			testutil.WaitFor(t, 10*time.Second, "the flood's handshake to start", func() bool { return l.inProgress() == 3+i })
		} else {
			assertClosed(t, flood[i-handshakes().PerSource]) // its place taken by flood[i]
		}
	}
	if n := l.inProgress(); n != 2+handshakes().PerSource {
		t.Errorf("%d handshakes in progress, want the 2 senders' and %d of the flood's", n, handshakes().PerSource)
	}
	if _, err := slow.Write(b[len(b)/2:]); err != nil {
		t.Fatal(err)
	}
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer := make([]byte, conn.ParamsLen)
	var p conn.Params
	if _, err := io.ReadFull(slow, answer); err != nil {
		t.Fatalf("the slow sender's answer: %v", err)
	}
	if err := p.UnmarshalBinary(answer); err != nil || p.Busy {
		t.Fatalf("the slow sender's answer %+v (%v), want the negotiated parameters", p, err)
	}
	want := map[string]bool{slow.LocalAddr().String(): true, progressed.Info().Local: true}
	for range 2 {
		r, err := l.Accept(t.Context())
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		if !want[r.Info().Remote] {
			t.Errorf("accepted %s, want the two senders %v", r.Info().Remote, want)
		}
		delete(want, r.Info().Remote)
		_ = r.Close()
	}
}

// inProgress returns the number of handshakes in progress.
func (l *Listener) inProgress() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending.Len()
}

// TestListenerBusy checks that a busy listener answers a valid proposal
// with its own parameters and the busy flag, closes the connection without
// allocating its buffers (neither side does: the parameters ask for 64 MiB
// per side), that the dialer reports it as KindBusy, that Accept never sees
// it, and that the listener serves senders again when no longer busy.
func TestListenerBusy(t *testing.T) {
	big := conn.NewParams(16<<20, 4)
	l, err := Listen(t.Context(), "127.0.0.1:0", big)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.SetBusy(true)

	t.Run("raw answer", func(t *testing.T) {
		c, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		b, _ := proposal.MarshalBinary()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		var got conn.Params
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if want := (conn.Params{Version: conn.Version, Chunk: big.Chunk, Depth: big.Depth, Busy: true}); got != want {
			t.Errorf("busy answer %+v, want %+v", got, want)
		}
		assertClosed(t, c)
	})

	t.Run("dial", func(t *testing.T) {
		before := allocated(t)
		_, err := Dial(t.Context(), l.Addr(), big)
		// Either side's buffers take 64 MiB or more; threads' stacks or
		// a runtime's reservation may add a few MiB of address space.
		if grew := allocated(t) - before; grew > 40<<20 {
			t.Errorf("a busy refusal allocated %d bytes", grew)
		}
		want := "connect " + l.Addr() + ": receiver busy with another stream: retry later"
		if conn.KindOf(err) != conn.KindBusy || err == nil || err.Error() != want {
			t.Errorf("dial: %v (%v), want %v: %s", err, conn.KindOf(err), conn.KindBusy, want)
		}
	})

	l.SetBusy(false)
	before := allocated(t)
	s, r, err := dialAccept(t, l, l.Addr(), big)
	if err != nil {
		t.Fatalf("dial after busy: %v", err)
	}
	defer s.Close()
	defer r.Close()
	if grew := allocated(t) - before; grew < 4*16<<20 { // the sender's; the receiver's window is not open

		t.Errorf("a connection allocated only %d bytes: the allocation check above proves nothing", grew)
	}
	if s.Info().Local != r.Info().Remote {
		t.Errorf("Accept returned %s, want the sender %s", r.Info().Remote, s.Info().Local)
	}
}

// allocated returns how many bytes the process has allocated so far: on
// the Go heap, and mapped (connections map their buffers).
func allocated(t *testing.T) int64 {
	t.Helper()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var kib int64
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kib, err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmSize: %v", err)
			}
		}
	}
	return int64(m.TotalAlloc) + kib<<10
}

// TestDialStrangers checks how Dial fails against things that are not
// rdmapipe receivers, or receivers that refuse.
func TestDialStrangers(t *testing.T) {
	t.Parallel()
	answer := func(p conn.Params) func(net.Conn) {
		return func(c net.Conn) { b, _ := p.MarshalBinary(); _, _ = c.Write(b) }
	}
	say := func(s string) func(net.Conn) { return func(c net.Conn) { _, _ = io.WriteString(c, s) } }
	hangUp := func(c net.Conn) { _ = c.Close() }
	tests := []struct {
		name    string
		answer  func(net.Conn)
		timeout time.Duration // of the context
		kind    conn.Kind
		want    string // after "connect ADDR: "
	}{
		{"ssh", say("SSH-2.0-OpenSSH_9.6 0123456789\r\n"), 0, conn.KindSetup,
			`the peer is not an rdmapipe receiver (it answered "SSH-2.0-OpenSSH_")`},
		{"binary", say(strings.Repeat("\xff\x00", 20)), 0, conn.KindSetup,
			`the peer is not an rdmapipe receiver (it answered "\xff\x00\xff\x00\xff\x00\xff\x00\xff\x00\xff\x00\xff\x00\xff\x00")`},
		{"hang up", hangUp, 0, conn.KindSetup,
			"the peer closed the connection without an rdmapipe handshake answer: is an rdmapipe receiver listening there?"},
		{"short then hang up", func(c net.Conn) { say("RDP")(c); hangUp(c) }, 0, conn.KindSetup,
			`the peer closed the connection without an rdmapipe handshake answer (it answered "RDP"): is an rdmapipe receiver listening there?`},
		{"silent", func(net.Conn) {}, 0, conn.KindSetup,
			"no rdmapipe handshake answer within 100ms: is an rdmapipe receiver listening there?"},
		{"short then silent", say("HTTP/1.1"), 0, conn.KindSetup,
			`no rdmapipe handshake answer within 100ms (it answered "HTTP/1.1"): is an rdmapipe receiver listening there?`},
		{"silent past the deadline", func(net.Conn) {}, 50 * time.Millisecond, conn.KindAborted,
			"context deadline exceeded"},
		{"busy", answer(conn.Params{Version: conn.Version, Chunk: 1, Depth: 3, Busy: true}), 0, conn.KindBusy,
			"receiver busy with another stream: retry later"},
		{"other version", answer(conn.Params{Version: conn.Version + 1}), 0, conn.KindSetup,
			fmt.Sprintf("version mismatch: the receiver speaks protocol version %d and this sender %d: use the same rdmapipe release on both hosts", conn.Version+1, conn.Version)},
		{"bigger chunk", answer(conn.NewParams(2*proposal.Chunk, proposal.Depth)), 0, conn.KindSetup,
			fmt.Sprintf("the receiver refused chunk %d, depth %d (it answered chunk %d, depth %d)", proposal.Chunk, proposal.Depth, 2*proposal.Chunk, proposal.Depth)},
		{"refusal", answer(conn.Params{Version: conn.Version}), 0, conn.KindSetup,
			fmt.Sprintf("the receiver refused chunk %d, depth %d (it answered chunk 0, depth 0)", proposal.Chunk, proposal.Depth)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = io.ReadFull(c, make([]byte, conn.ParamsLen))
				tt.answer(c)
				_, _ = io.Copy(io.Discard, c) // until the dialer hangs up
			}()
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			addr := ln.Addr().String()
			_, err = Dialer{HandshakeTimeout: 100 * time.Millisecond}.Dial(ctx, addr, proposal)
			if want := "connect " + addr + ": " + tt.want; conn.KindOf(err) != tt.kind || err == nil || err.Error() != want {
				t.Errorf("dial: %v (%v)\nwant %v: %s", err, conn.KindOf(err), tt.kind, want)
			}
			<-done
		})
	}
}

// TestQuote checks that error messages quote at most maxQuoted bytes.
func TestQuote(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", `""`},
		{"RDP\n", `"RDP\n"`},
		{strings.Repeat("a", maxQuoted), `"` + strings.Repeat("a", maxQuoted) + `"`},
		{strings.Repeat("\x00", maxQuoted+1), `"` + strings.Repeat(`\x00`, maxQuoted) + `"...`},
	}
	for _, tt := range tests {
		if got := quote([]byte(tt.in)); got != tt.want {
			t.Errorf("quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestBadArguments checks the errors for bad parameters and addresses.
func TestBadArguments(t *testing.T) {
	t.Parallel()
	bad := conn.NewParams(0, 4)
	tests := []struct {
		name string
		err  func() error
		kind conn.Kind
	}{
		{"listen with bad parameters", func() error { _, err := Listen(t.Context(), "127.0.0.1:0", bad); return err }, conn.KindUsage},
		{"dial with bad parameters", func() error { _, err := Dial(t.Context(), "127.0.0.1:1", bad); return err }, conn.KindUsage},
		{"listen on a bad address", func() error { _, err := Listen(t.Context(), "256.0.0.1:0", local); return err }, conn.KindSetup},
		{"dial nobody", func() error { _, err := Dial(t.Context(), refusingAddr(t), proposal); return err }, conn.KindSetup},
	}
	for _, tt := range tests {
		if err := tt.err(); conn.KindOf(err) != tt.kind {
			t.Errorf("%s: %v (%v), want %v", tt.name, err, conn.KindOf(err), tt.kind)
		}
	}
}

// refusingAddr returns a loopback address nobody listens on.
func refusingAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestAcceptEnds checks that Accept returns when its context ends, that the
// listener still works after that, and that Close ends Accept and every
// handshake in progress, and returns only when they have ended.
func TestAcceptEnds(t *testing.T) {
	t.Parallel()
	l, err := ListenConfig{HandshakeTimeout: time.Hour}.Listen(t.Context(), "127.0.0.1:0", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Accept(ctx); conn.KindOf(err) != conn.KindAborted || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("accept past its deadline: %v", err)
	}
	s, r, err := dialAccept(t, l, l.Addr(), proposal)
	if err != nil {
		t.Fatalf("after an interrupted accept: %v", err)
	}
	_ = s.Close()
	_ = r.Close()
	stranger, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	testutil.WaitFor(t, 10*time.Second, "the stranger's handshake to start", func() bool { return l.inProgress() == 1 })
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept(t.Context())
		accepted <- err
	}()
	if err := l.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if n := l.inProgress(); n != 0 {
		t.Errorf("close returned with %d handshakes in progress", n)
	}
	assertClosed(t, stranger)
	select {
	case err := <-accepted:
		if !errors.Is(err, conn.ErrClosed) || conn.KindOf(err) != conn.KindSetup {
			t.Errorf("accept on a closed listener: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close did not end a pending accept")
	}
	if _, err := l.Accept(t.Context()); !errors.Is(err, conn.ErrClosed) {
		t.Errorf("accept after close: %v", err)
	}
}

// TestCloseDropsFinished checks that Close closes a connection whose
// handshake finished but that no Accept took: its sender sees it end.
func TestCloseDropsFinished(t *testing.T) {
	l, err := Listen(t.Context(), "127.0.0.1:0", local)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Dial(t.Context(), l.Addr(), proposal)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := l.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := pollError(t, s); conn.KindOf(err) != conn.KindAborted || !strings.Contains(err.Error(), "peer closed the connection") {
		t.Errorf("poll: %v (%v), want the peer closed the connection", err, conn.KindOf(err))
	}
}

// TestWindowAfterAuthentication checks that an accepted connection holds
// no chunk-sized buffer until its window is opened (after the sender
// authenticated itself, in the engine): its proposal alone makes the
// receiver map a few KiB, however large the chunks it asks for.
func TestWindowAfterAuthentication(t *testing.T) {
	big := conn.NewParams(16<<20, 4)
	l, err := Listen(t.Context(), "127.0.0.1:0", big)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, _ := big.MarshalBinary()
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	before := allocated(t)
	r, err := l.Accept(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A receiver's buffers for big take 48 MiB; a thread's stack or a
	// runtime's reservation may add a few MiB of address space.
	if grew := allocated(t) - before; grew > 40<<20 {
		t.Errorf("accepting a connection allocated %d bytes before its window opened", grew)
	}
	for i := range r.RecvBufs() - conn.SpareRecvs {
		if r.RecvBuf(i) != nil {
			t.Fatalf("data receive buffer %d exists before the window opened", i)
		}
	}
	before = allocated(t)
	if _, err := r.(conn.Window).OpenWindow(); err != nil {
		t.Fatal(err)
	}
	if grew := allocated(t) - before; grew < 3*16<<20 {
		t.Errorf("opening the window allocated only %d bytes: the check above proves nothing", grew)
	}
	if len(r.RecvBuf(0)) != big.Chunk+conn.TagLen+conn.TrailerLen {
		t.Errorf("data receive buffer 0 holds %d bytes after the window opened", len(r.RecvBuf(0)))
	}
}
