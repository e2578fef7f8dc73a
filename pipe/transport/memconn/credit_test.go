package memconn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestCreditViolation checks that a message with no receive buffer posted
// for it fails both ends and is counted.
func TestCreditViolation(t *testing.T) {
	s, r := pair(t, Faults{})
	n := r.RecvBufs() - conn.SpareRecvs
	for k := range n + 1 {
		if err := s.PostSend(k, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*Conn{r, s} {
		var err error
		for err == nil {
			_, err = poll(c, time.Second)
		}
		if !strings.Contains(err.Error(), "no posted data receive buffer") || conn.KindOf(err) != conn.KindInternal {
			t.Errorf("%s: %v", c.Info().Local, err)
		}
	}
	if st := r.Stats(); st.Violations != 1 || st.Received != n {
		t.Errorf("receiver stats %+v, want 1 violation after %d messages", st, n)
	}
	if st := s.Stats(); st.Violations != 0 || st.MaxDataInFlight != n+1 {
		t.Errorf("sender stats %+v, want %d data messages in flight", st, n+1)
	}
}

// TestWindow checks that a receiver end has only its spares, of
// conn.MaxControl bytes, until its window is opened: control messages
// land, a data message fails the pair and counts as a violation.
func TestWindow(t *testing.T) {
	p := conn.NewParams(1<<20, 4)
	s, r, err := Pair(p, p, Faults{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = r.Close()
	})
	credits := r.RecvBufs() - conn.SpareRecvs
	for i := range r.RecvBufs() {
		want := 0
		if i >= credits {
			want = conn.MaxControl
		}
		if got := len(r.RecvBuf(i)); got != want {
			t.Errorf("before the window opens, receive buffer %d holds %d bytes, want %d", i, got, want)
		}
	}
	if err := s.SendControl(context.Background(), []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if cs, err := poll(r, time.Second); err != nil || len(cs) != 1 || cs[0].Buf < credits {
		t.Fatalf("control message: %v, %v", cs, err)
	}
	if err := s.PostSend(0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := poll(r, time.Second); err == nil || !strings.Contains(err.Error(), "no posted data receive buffer") {
		t.Errorf("data before the window: %v", err)
	}
	if v := r.Stats().Violations; v != 1 {
		t.Errorf("%d violations, want 1", v)
	}
}

// TestSpares checks that the receiver end keeps its spares for control
// messages, as an RDMA receiver with a ring does: with every data buffer
// full, the sender's control messages still land, each in a spare, but one
// more than there are spares fails both ends and is counted, even though a
// re-posted data buffer is free.
func TestSpares(t *testing.T) {
	s, r := pair(t, Faults{})
	credits := r.RecvBufs() - conn.SpareRecvs
	for k := range credits {
		if err := s.PostSend(k, 1); err != nil {
			t.Fatal(err)
		}
	}
	for k := range conn.SpareRecvs {
		if err := s.SendControl(context.Background(), []byte{byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []conn.Completion
	for len(got) < credits+conn.SpareRecvs {
		cs, err := poll(r, time.Second)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(got), err)
		}
		got = append(got, cs...)
	}
	for k, c := range got {
		if spare := c.Buf >= credits; spare != (k >= credits) {
			t.Errorf("message %d landed in buffer %d", k, c.Buf)
		}
	}
	if err := r.PostRecv(got[0].Buf); err != nil {
		t.Fatal(err)
	}
	if err := s.SendControl(context.Background(), []byte{9}); err != nil {
		t.Fatal(err)
	}
	_, err := poll(r, time.Second)
	if err == nil || !strings.Contains(err.Error(), "no posted spare receive buffer") {
		t.Errorf("receiver: %v", err)
	}
	if r.Stats().Violations != 1 {
		t.Errorf("receiver stats %+v, want 1 violation", r.Stats())
	}
}

// TestOversizeViolation checks that a message too large for the receive
// buffers is a counted violation.
func TestOversizeViolation(t *testing.T) {
	s, r := pair(t, Faults{})
	if err := s.PostSend(0, len(r.RecvBuf(0))+1); err != nil {
		t.Fatal(err)
	}
	_, err := poll(r, time.Second)
	if err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("receiver: %v", err)
	}
	if r.Stats().Violations != 1 {
		t.Errorf("receiver stats %+v", r.Stats())
	}
}

// TestInFlight checks the in-flight counts: a message stays in flight until
// the receiver re-posts the buffer it landed in.
func TestInFlight(t *testing.T) {
	s, r := pair(t, Faults{})
	steps := []struct {
		name       string
		do         func() error
		data, msgs int // in flight after the step
	}{
		{"data", func() error { return s.PostSend(0, 1) }, 1, 1},
		{"control", func() error { return s.SendControl(context.Background(), []byte{1}) }, 1, 2},
		{"data again", func() error { return s.PostSend(1, 1) }, 2, 3},
		{"re-post all", func() error { return repost(r, 3) }, 0, 0},
		{"data after", func() error { return s.PostSend(2, 1) }, 1, 1},
	}
	maxData, maxMsgs := 0, 0
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		maxData, maxMsgs = max(maxData, st.data), max(maxMsgs, st.msgs)
		got := s.Stats()
		if got.MaxDataInFlight != maxData || got.MaxInFlight != maxMsgs {
			t.Errorf("after %s: %+v, want max %d data and %d messages in flight", st.name, got, maxData, maxMsgs)
		}
	}
	if st := s.Stats(); st.Sent != 4 || st.Received != 0 {
		t.Errorf("sender stats %+v", st)
	}
}

// repost polls r for n messages and re-posts their buffers.
func repost(r *Conn, n int) error {
	for n > 0 {
		cs, err := poll(r, time.Second)
		if err != nil {
			return err
		}
		for _, c := range cs {
			if err := r.PostRecv(c.Buf); err != nil {
				return err
			}
			n--
		}
	}
	return nil
}

// TestPeerClosedError checks the error after the peer closes.
func TestPeerClosedError(t *testing.T) {
	s, r := pair(t, Faults{})
	_ = s.Close()
	_, err := poll(r, time.Second)
	if err == nil || err.Error() != "receive from mem:sender: peer closed the connection" || errors.Is(err, conn.ErrClosed) {
		t.Errorf("poll: %v", err)
	}
	if s.Info().Transport != "mem" || s.Info().Remote != "mem:receiver" {
		t.Errorf("info %+v", s.Info())
	}
}

// TestRepostOrder checks that buffers holding data must come back in the
// order their data arrived, while control buffers may come back any time.
func TestRepostOrder(t *testing.T) {
	s, r := pair(t, Faults{})
	for i := range 2 {
		if err := s.PostSend(i, 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SendControl(context.Background(), []byte{1}); err != nil {
		t.Fatal(err)
	}
	var got []conn.Completion
	for len(got) < 3 {
		cs, err := poll(r, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, cs...)
	}
	first, second, ctrl := got[0].Buf, got[1].Buf, got[2].Buf
	if err := r.PostRecv(ctrl); err != nil {
		t.Errorf("control buffer re-posted ahead of the data: %v", err)
	}
	if err := r.PostRecv(second); err == nil || !strings.Contains(err.Error(), "whose data arrived first") {
		t.Errorf("re-posting the second data buffer first: %v", err)
	}
	if err := r.PostRecv(first); err != nil {
		t.Error(err)
	}
	if err := r.PostRecv(second); err != nil {
		t.Error(err)
	}
	if v := r.Stats().Violations; v != 1 {
		t.Errorf("%d violations, want 1", v)
	}
}
