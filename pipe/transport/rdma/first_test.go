package rdma

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestSpeech checks who speaks first: on iWARP the dialer greets and the
// listener waits for it; elsewhere neither does anything more.
func TestSpeech(t *testing.T) {
	for _, tc := range []struct {
		iwarp, dialer  bool
		greets, awaits bool
	}{
		{iwarp: true, dialer: true, greets: true},
		{iwarp: true, dialer: false, awaits: true},
		{iwarp: false, dialer: true},
		{iwarp: false, dialer: false},
	} {
		s := speech{iwarp: tc.iwarp, dialer: tc.dialer}
		if s.greets() != tc.greets || s.awaits() != tc.awaits {
			t.Errorf("%+v: greets %v, awaits %v; want %v, %v", s, s.greets(), s.awaits(), tc.greets, tc.awaits)
		}
	}
}

// TestCheckFirst checks that only the first message of this protocol
// version passes, whatever a peer sends instead.
func TestCheckFirst(t *testing.T) {
	if err := checkFirst(firstMessage()); err != nil {
		t.Fatalf("checkFirst(firstMessage()) = %v", err)
	}
	older := firstMessage()
	binary.LittleEndian.PutUint16(older[4:], conn.Version-1)
	padded := make([]byte, firstLen)
	copy(padded, firstMessage())
	padded[7] = 1
	for name, b := range map[string][]byte{
		"empty":            {},
		"short":            firstMessage()[:firstLen-1],
		"long":             append(firstMessage(), 0),
		"older version":    older,
		"non-zero padding": padded,
		"the engine's":     []byte("HELOxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
		"another magic":    append([]byte("RDPJ"), firstMessage()[4:]...),
	} {
		err := checkFirst(b)
		if err == nil {
			t.Errorf("%s: checkFirst(%q) passed", name, b)
			continue
		}
		if !strings.Contains(err.Error(), "first message") || len(err.Error()) > 200 {
			t.Errorf("%s: checkFirst = %q; want a short error about the first message", name, err)
		}
	}
}

// TestListenerSpeaksAtOnce connects many times in a row, the accepting
// side sending a control message the moment Accept returns, as the
// engine's receiver does. Over iWARP (siw) without the dialer's first
// message such a message could reach the dialer with the MPA reply, and
// siw failed the connect with EINVAL.
func TestListenerSpeaksAtOnce(t *testing.T) {
	p := conn.NewParams(4096, 4)
	l := listenRXE(t, p, DefaultOptions())
	accepted := acceptAll(t, l)
	hello := []byte("the receiver speaks")
	for i := range 30 {
		ctx := timeout(t, 30*time.Second)
		spoke := make(chan error, 1)
		go func() {
			a := next(t, accepted)
			if a.err != nil {
				spoke <- a.err
				return
			}
			spoke <- a.c.SendControl(ctx, hello)
		}()
		snd, err := Dialer{DefaultOptions()}.Dial(ctx, l.Addr(), p)
		if err != nil {
			t.Fatalf("connection %d: Dial: %v", i, err)
		}
		if err := <-spoke; err != nil {
			t.Fatalf("connection %d: Accept or SendControl: %v", i, err)
		}
		c := poll(t, snd)
		if c.Op != conn.OpRecv || !bytes.Equal(snd.RecvBuf(c.Buf)[:c.Len], hello) {
			t.Fatalf("connection %d: the dialer got %+v, want the listener's message", i, c)
		}
		snd.Close()
	}
}

// establishRaw connects to l as Dial does but returns once the connection
// is established, without the first message that Dial sends on iWARP.
func establishRaw(t *testing.T, l *Listener) *Conn {
	t.Helper()
	ctx := timeout(t, 20*time.Second)
	p := conn.NewParams(4096, 4)
	c, _, err := Dialer{DefaultOptions()}.establish(ctx, netip.MustParseAddrPort(l.Addr()), p, "raw")
	if err != nil {
		t.Fatalf("establish: %v", err)
	}
	return c
}

// TestFirstMessageChecked plays dialers that do not send the first
// message, or send another: on iWARP the listener fails their setups (within
// its establish bound) and keeps listening; on RoCE no first message is
// due and the connection is accepted at once.
func TestFirstMessageChecked(t *testing.T) {
	const establish = 3 * time.Second
	l := listenFor(t, establish)
	accepted := acceptAll(t, l)
	silent := establishRaw(t, l)
	start := time.Now()
	a := next(t, accepted)
	if !iwarp() {
		if a.err != nil {
			t.Fatalf("RoCE: a dialer without a first message: Accept = %v, want the connection", a.err)
		}
		return
	}
	if a.err == nil || !strings.Contains(a.err.Error(), "peer did not send its first message within") {
		t.Fatalf("a silent dialer: Accept = %v, %v; want the setup to fail without its first message", a.c, a.err)
	}
	if waited := time.Since(start); waited < establish/2 {
		t.Errorf("the silent dialer's setup failed after %v, before its bound of %v", waited, establish)
	}
	silent.free()

	for name, msg := range map[string][]byte{
		"the engine's hello": []byte("HELO, not the first message"),
		"an older version":   append(append([]byte{}, firstMagic[:]...), 10, 0, 0, 0),
	} {
		c := establishRaw(t, l)
		if err := c.SendControl(timeout(t, 10*time.Second), msg); err != nil {
			t.Fatalf("%s: SendControl: %v", name, err)
		}
		a := next(t, accepted)
		if a.err == nil || !strings.Contains(a.err.Error(), "first message") {
			t.Fatalf("%s: Accept = %v, %v; want the setup to fail on its first message", name, a.c, a.err)
		}
		c.free()
	}
	snd, rcv, err, aerr := connect(timeout(t, 20*time.Second), l, Dialer{DefaultOptions()}, conn.NewParams(4096, 4))
	if err != nil || aerr != nil {
		t.Fatalf("after the failed setups: Dial: %v; Accept: %v", err, aerr)
	}
	snd.Close()
	rcv.Close()
}
