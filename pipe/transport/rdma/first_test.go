package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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

// TestParseFirst checks that only the messages of the exchange, of this
// protocol version, pass, whatever a peer sends instead.
func TestParseFirst(t *testing.T) {
	for _, kind := range []byte{kindFirst, kindAnswer, kindConfirm} {
		if k, n, err := parseFirst(firstMessage(kind, 2)); err != nil || k != kind || n != 2 {
			t.Errorf("parseFirst(firstMessage(%q, 2)) = %q, %d, %v", kind, k, n, err)
		}
	}
	older := firstMessage(kindFirst, 0)
	binary.LittleEndian.PutUint16(older[4:], conn.Version-1)
	padded := firstMessage(kindFirst, 0)
	padded[7] = 1
	for name, b := range map[string][]byte{
		"empty":            {},
		"short":            firstMessage(kindFirst, 0)[:firstLen-1],
		"long":             append(firstMessage(kindFirst, 0), 0),
		"older version":    older,
		"non-zero padding": padded,
		"the engine's":     []byte("HELOxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
		"another magic":    append([]byte("RDQ"), firstMessage(kindFirst, 0)[3:]...),
	} {
		_, _, err := parseFirst(b)
		if err == nil {
			t.Errorf("%s: parseFirst(%q) passed", name, b)
			continue
		}
		if !strings.Contains(err.Error(), "first message") || len(err.Error()) > 200 {
			t.Errorf("%s: parseFirst = %q; want a short error about the first message", name, err)
		}
	}
}

// TestHearing plays the dialer's messages to a listener's books: one or
// two first messages, the answer after the first, and the confirmation of
// their number; anything else fails.
func TestHearing(t *testing.T) {
	f := firstMessage(kindFirst, 0)
	type step struct {
		msg          []byte
		answer, done bool
		err          string
	}
	for name, steps := range map[string][]step{
		"first, confirm":        {{msg: f, answer: true}, {msg: firstMessage(kindConfirm, 1), done: true}},
		"first, nudge, confirm": {{msg: f, answer: true}, {msg: f}, {msg: firstMessage(kindConfirm, 2), done: true}},
		"three firsts":          {{msg: f, answer: true}, {msg: f}, {msg: f, err: "more than 2 first messages"}},
		"confirm first":         {{msg: firstMessage(kindConfirm, 0), err: "a confirmation of 0 first messages, where 0 arrived"}},
		"confirm too few":       {{msg: f, answer: true}, {msg: f}, {msg: firstMessage(kindConfirm, 1), err: "a confirmation of 1 first messages, where 2 arrived"}},
		"confirm too many":      {{msg: f, answer: true}, {msg: firstMessage(kindConfirm, 2), err: "where 1 arrived"}},
		"an answer":             {{msg: firstMessage(kindAnswer, 0), err: "kind 'A'"}},
		"first with a count":    {{msg: firstMessage(kindFirst, 1), err: "kind 'F' (count 1)"}},
		"engine's message":      {{msg: f, answer: true}, {msg: []byte("HELO"), err: "not a first message"}},
	} {
		var h hearing
		for i, s := range steps {
			answer, done, err := h.take(s.msg)
			if s.err != "" {
				if err == nil || !strings.Contains(err.Error(), s.err) {
					t.Errorf("%s, step %d: take = %v, want an error with %q", name, i, err, s.err)
				}
				break
			}
			if err != nil || answer != s.answer || done != s.done {
				t.Errorf("%s, step %d: take = %v, %v, %v; want %v, %v", name, i, answer, done, err, s.answer, s.done)
				break
			}
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
		snd, err := Dialer{Options: DefaultOptions()}.Dial(ctx, l.Addr(), p)
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
	c, _, err := Dialer{Options: DefaultOptions()}.establish(ctx, netip.MustParseAddrPort(l.Addr()), p, "raw")
	if err != nil {
		t.Fatalf("establish: %v", err)
	}
	return c
}

// TestFirstMessageChecked plays dialers that do not send the first
// message, or send another, or confirm a wrong number: on iWARP the
// listener fails their setups (a silent one within its establish bound)
// and keeps listening; on RoCE no first message is due and the connection
// is accepted at once.
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
	if a.err == nil || !strings.Contains(a.err.Error(), "peer did not send its first messages within") {
		t.Fatalf("a silent dialer: Accept = %v, %v; want the setup to fail without its first message", a.c, a.err)
	}
	if waited := time.Since(start); waited < establish/2 {
		t.Errorf("the silent dialer's setup failed after %v, before its bound of %v", waited, establish)
	}
	silent.free()

	older := firstMessage(kindFirst, 0)
	binary.LittleEndian.PutUint16(older[4:], conn.Version-1)
	for name, msg := range map[string][]byte{
		"the engine's hello": []byte("HELO, not the first message"),
		"an older version":   older,
		"a confirmation":     firstMessage(kindConfirm, 1),
	} {
		c := establishRaw(t, l)
		a := sendNudged(t, c, msg, accepted)
		if a.err == nil || !strings.Contains(a.err.Error(), "first message") || strings.Contains(a.err.Error(), "within") {
			t.Fatalf("%s: Accept = %v, %v; want the setup to fail on its first message", name, a.c, a.err)
		}
		c.free()
	}

	// First messages and their answer, then a confirmation of one more.
	c := establishRaw(t, l)
	ctx := timeout(t, 10*time.Second)
	sent := firstExchange(t, c)
	if err := c.SendControl(ctx, firstMessage(kindConfirm, sent+1)); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("a confirmation of %d first messages, where %d arrived", sent+1, sent)
	if a := next(t, accepted); a.err == nil || !strings.Contains(a.err.Error(), want) {
		t.Fatalf("a wrong confirmation: Accept = %v, %v; want the setup to fail with %q", a.c, a.err, want)
	}
	c.free()

	// Two first messages (the second after the answer, when it was not
	// needed before), then a confirmation of two: accepted.
	c = establishRaw(t, l)
	if firstExchange(t, c) == 1 {
		if err := c.SendControl(ctx, firstMessage(kindFirst, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SendControl(ctx, firstMessage(kindConfirm, 2)); err != nil {
		t.Fatal(err)
	}
	if a := next(t, accepted); a.err != nil {
		t.Fatalf("a first message and its nudge: Accept: %v", a.err)
	}
	c.free()

	snd, err := Dialer{Options: DefaultOptions()}.Dial(timeout(t, 20*time.Second), l.Addr(), conn.NewParams(4096, 4))
	if err != nil {
		t.Fatalf("after the failed setups: Dial: %v", err)
	}
	defer snd.Close()
	if a := next(t, accepted); a.err != nil {
		t.Fatalf("after the failed setups: Accept: %v", a.err)
	}
}

// sendNudged sends msg as a dialer's first message and returns the
// listener's verdict, sending msg once more, as Dial nudges, when none came
// within nudgeAfter (siw may leave a first message unread, see first.go).
func sendNudged(t *testing.T, c *Conn, msg []byte, accepted <-chan accepted) accepted {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	if err := c.SendControl(ctx, msg); err != nil {
		t.Fatalf("SendControl: %v", err)
	}
	select {
	case a := <-accepted:
		return a
	case <-time.After(nudgeAfter):
	}
	if err := c.SendControl(ctx, msg); err != nil {
		t.Fatalf("SendControl: %v", err)
	}
	return next(t, accepted)
}

// firstExchange sends the first message, and its nudge if the answer is
// late, as Dial does, takes the answer and returns how many first messages
// it sent.
func firstExchange(t *testing.T, c *Conn) int {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	for sent := 1; sent <= maxFirsts; sent++ {
		if err := c.SendControl(ctx, firstMessage(kindFirst, 0)); err != nil {
			t.Fatalf("SendControl: %v", err)
		}
		wait, cancel := ctx, context.CancelFunc(func() {})
		if sent < maxFirsts {
			wait, cancel = context.WithTimeout(ctx, nudgeAfter)
		}
		err := c.hear(wait, kindAnswer)
		cancel()
		if err == nil {
			return sent
		}
		if !errors.Is(err, context.DeadlineExceeded) || sent == maxFirsts {
			t.Fatalf("the listener's answer to %d first messages: %v", sent, err)
		}
	}
	return 0
}
