package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
)

var (
	proposal = pipe.NewParams(8192, 8)
	local    = pipe.NewParams(4096, 4)
)

// TestAddresses connects over IPv4, IPv6 and a host name.
func TestAddresses(t *testing.T) {
	tests := []struct{ name, listen, host string }{
		{"ipv4", "127.0.0.1:0", "127.0.0.1"},
		{"ipv6", "[::1]:0", "::1"},
		{"hostname", "127.0.0.1:0", "localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Listen(t.Context(), tt.listen, local)
			if err != nil {
				t.Skipf("no %s loopback here: %v", tt.name, err)
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
	p.Version = pipe.Version + 1
	_, err = Dial(t.Context(), l.Addr(), p)
	if pipe.KindOf(err) != pipe.KindSetup || !strings.Contains(err.Error(), fmt.Sprintf("the receiver speaks protocol version %d and this sender %d", pipe.Version, pipe.Version+1)) {
		t.Errorf("dial: %v", err)
	}
	err = <-accepted
	if pipe.KindOf(err) != pipe.KindSetup || !strings.Contains(err.Error(), fmt.Sprintf("peer speaks protocol version %d", pipe.Version+1)) {
		t.Errorf("accept: %v", err)
	}
	s, r, err := dialAccept(t, l, l.Addr(), proposal)
	if err != nil {
		t.Fatalf("the listener refused a good sender after a bad one: %v", err)
	}
	_ = s.Close()
	_ = r.Close()
}

// TestAcceptSkipsStrangers checks that Accept skips connections that are
// not rdmapipe senders and accepts the sender behind them.
func TestAcceptSkipsStrangers(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 500 * time.Millisecond
	tests := []struct {
		name string
		talk func(net.Conn)
	}{
		{"garbage", func(c net.Conn) { _, _ = io.WriteString(c, "GET / HTTP/1.0\r\n\r\n") }},
		{"short", func(c net.Conn) { _, _ = io.WriteString(c, "RDPP") }},
		{"hang up", func(c net.Conn) { _ = c.Close() }},
		{"silent", func(net.Conn) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Listen(t.Context(), "127.0.0.1:0", local)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			stranger, err := net.Dial("tcp", l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer stranger.Close()
			tt.talk(stranger)
			s, r, err := dialAccept(t, l, l.Addr(), proposal)
			if err != nil {
				t.Fatalf("the sender behind a stranger: %v", err)
			}
			_ = s.Close()
			_ = r.Close()
			_ = stranger.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := stranger.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the stranger's connection is still open: %v", err)
			}
		})
	}
}

// TestDialStrangers checks how Dial fails against things that are not
// rdmapipe receivers.
func TestDialStrangers(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 100 * time.Millisecond
	tests := []struct {
		name    string
		answer  func(net.Conn)
		timeout time.Duration
		kind    pipe.Kind
		want    string
	}{
		{"garbage", func(c net.Conn) { _, _ = io.WriteString(c, "SSH-2.0-OpenSSH_9.6 0123456789\r\n") }, 0, pipe.KindSetup, "not an rdmapipe endpoint"},
		{"hang up", func(c net.Conn) { _ = c.Close() }, 0, pipe.KindSetup, "hung up during the handshake"},
		{"silent", func(net.Conn) {}, 0, pipe.KindSetup, "no handshake answer within 200ms"},
		{"silent past the deadline", func(net.Conn) {}, 50 * time.Millisecond, pipe.KindAborted, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = io.ReadFull(c, make([]byte, pipe.ParamsLen))
				tt.answer(c)
				time.Sleep(time.Second)
			}()
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			_, err = Dial(ctx, ln.Addr().String(), proposal)
			if pipe.KindOf(err) != tt.kind || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("dial: %v (%v), want %v containing %q", err, pipe.KindOf(err), tt.kind, tt.want)
			}
		})
	}
}

// TestBadArguments checks the errors for bad parameters and addresses.
func TestBadArguments(t *testing.T) {
	bad := pipe.NewParams(0, 4)
	tests := []struct {
		name string
		err  func() error
		kind pipe.Kind
	}{
		{"listen with bad parameters", func() error { _, err := Listen(t.Context(), "127.0.0.1:0", bad); return err }, pipe.KindUsage},
		{"dial with bad parameters", func() error { _, err := Dial(t.Context(), "127.0.0.1:1", bad); return err }, pipe.KindUsage},
		{"listen on a bad address", func() error { _, err := Listen(t.Context(), "256.0.0.1:0", local); return err }, pipe.KindSetup},
		{"dial nobody", func() error { _, err := Dial(t.Context(), refusingAddr(t), proposal); return err }, pipe.KindSetup},
	}
	for _, tt := range tests {
		if err := tt.err(); pipe.KindOf(err) != tt.kind {
			t.Errorf("%s: %v (%v), want %v", tt.name, err, pipe.KindOf(err), tt.kind)
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
// listener still works after that, and that Close ends Accept even while it
// waits for a silent peer's handshake.
func TestAcceptEnds(t *testing.T) {
	l, err := Listen(t.Context(), "127.0.0.1:0", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Accept(ctx); pipe.KindOf(err) != pipe.KindAborted || !errors.Is(err, context.DeadlineExceeded) {
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
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept(t.Context())
		accepted <- err
	}()
	time.Sleep(50 * time.Millisecond)
	_ = l.Close()
	select {
	case err := <-accepted:
		if !errors.Is(err, pipe.ErrClosed) || pipe.KindOf(err) != pipe.KindSetup {
			t.Errorf("accept on a closed listener: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("close did not interrupt a handshake with a silent peer")
	}
	if _, err := l.Accept(t.Context()); !errors.Is(err, pipe.ErrClosed) {
		t.Errorf("accept after close: %v", err)
	}
}
