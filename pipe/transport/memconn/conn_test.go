package memconn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/pipetest"
)

var (
	proposal = conn.NewParams(8192, 8)
	local    = conn.NewParams(4096, 4)
)

func TestConn(t *testing.T) {
	pipetest.Run(t, func(t *testing.T, proposal, local conn.Params) (conn.Conn, conn.Conn, error) {
		s, r, err := Pair(proposal, local, Faults{})
		if err != nil {
			return nil, nil, err
		}
		return s, r, nil
	})
}

// pair makes a pair with faults f and closes it when the test ends.
func pair(t *testing.T, f Faults) (s, r *Conn) {
	t.Helper()
	s, r, err := Pair(proposal, local, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = r.Close()
	})
	if _, err := r.OpenWindow(); err != nil {
		t.Fatal(err)
	}
	return s, r
}

// poll polls c for up to d and returns the completions or error.
func poll(c *Conn, d time.Duration) ([]conn.Completion, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cs := make([]conn.Completion, 16)
	n, err := c.Poll(ctx, cs)
	return cs[:n], err
}

// received polls c until it fails or falls quiet and returns the first byte
// of every message it received, and the error.
func received(c *Conn) ([]byte, error) {
	var got []byte
	for {
		cs, err := poll(c, 200*time.Millisecond)
		if errors.Is(err, context.DeadlineExceeded) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		for _, x := range cs {
			got = append(got, c.RecvBuf(x.Buf)[0])
		}
		for _, x := range cs {
			if c.PostRecv(x.Buf) != nil {
				break // failed: Poll returns what arrived before, then why
			}
		}
	}
}

// TestFaults checks each fault in each direction.
func TestFaults(t *testing.T) {
	tests := []struct {
		name    string
		f       Faults
		reverse bool   // send from the receiver end
		want    string // the last bytes of the messages that arrive
		err     string // the error both ends get, if any
	}{
		{"none", Faults{}, false, "\x01\x02\x03\x04", ""},
		{"drop", Faults{DropAt: 2}, false, "\x01\x03\x04", ""},
		{"corrupt", Faults{CorruptAt: 3}, false, "\x01\x02\x02\x04", ""},
		{"cut", Faults{CutAt: 3}, false, "\x01\x02", "connection lost: the peer vanished (fault injected at message 3)"},
		{"cut at the first", Faults{CutAt: 1}, false, "", "fault injected at message 1"},
		{"reverse drop", Faults{DropAt: 1, Reverse: &Faults{DropAt: 2}}, true, "\x01\x03\x04", ""},
		{"reverse corrupt", Faults{Reverse: &Faults{CorruptAt: 1}}, true, "\x00\x02\x03\x04", ""},
		{"reverse cut", Faults{Reverse: &Faults{CutAt: 4}}, true, "\x01\x02\x03", "fault injected at message 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Both ends at depth 8: the sender's four messages are data
			// messages under its 7 credits (a receiver takes control
			// messages only in its 2 spares); the receiver's are control
			// messages, which the sender has room for.
			s, r, err := Pair(proposal, proposal, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = s.Close()
				_ = r.Close()
			})
			if _, err := r.OpenWindow(); err != nil {
				t.Fatal(err)
			}
			from, to := s, r
			if tt.reverse {
				from, to = r, s
			}
			for k := byte(1); k <= 4; k++ {
				var err error
				if tt.reverse {
					err = from.SendControl(context.Background(), []byte{k, 0})
				} else {
					from.SendBuf(int(k))[0] = k
					err = from.PostSend(int(k), 2)
				}
				if err != nil && tt.err == "" {
					t.Fatal(err)
				}
			}
			got, err := received(to)
			if string(got) != tt.want {
				t.Errorf("received %q, want %q", got, tt.want)
			}
			if tt.err == "" {
				if err != nil {
					t.Errorf("receiving end failed: %v", err)
				}
				return
			}
			var fromErr error
			for fromErr == nil {
				_, fromErr = poll(from, time.Second)
			}
			for _, err := range []error{err, fromErr} {
				if err == nil || !strings.Contains(err.Error(), tt.err) || conn.KindOf(err) != conn.KindAborted {
					t.Errorf("error %v, want %q", err, tt.err)
				}
			}
		})
	}
}

// TestDropReportsSent checks that the sender of a dropped data message sees
// it sent, and that it stops counting as in flight.
func TestDropReportsSent(t *testing.T) {
	s, r := pair(t, Faults{DropAt: 1})
	if err := s.PostSend(0, 10); err != nil {
		t.Fatal(err)
	}
	cs, err := poll(s, time.Second)
	if err != nil || len(cs) != 1 || cs[0] != (conn.Completion{Op: conn.OpSend, Buf: 0, Len: 10}) {
		t.Fatalf("sender: %v %v", cs, err)
	}
	if cs, err := poll(r, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("receiver got %v %v from a dropped message", cs, err)
	}
	if err := s.PostSend(1, 20); err != nil {
		t.Fatal(err)
	}
	if cs, err := poll(r, time.Second); err != nil || len(cs) != 1 || cs[0].Len != 20 {
		t.Errorf("receiver got %v %v after a dropped message", cs, err)
	}
	if st := s.Stats(); st.Sent != 2 || st.MaxDataInFlight != 1 {
		t.Errorf("stats %+v, want 2 sent and at most 1 in flight", st)
	}
}

// TestDelay checks that messages arrive no sooner than the delay, in order,
// and that the delay is latency rather than a limit on throughput: all
// three are on their way at once.
func TestDelay(t *testing.T) {
	const delay = 100 * time.Millisecond
	s, r := pair(t, Faults{Reverse: &Faults{Delay: delay}})
	start := time.Now()
	for k := byte(1); k <= 3; k++ {
		if err := r.SendControl(context.Background(), []byte{k}); err != nil {
			t.Fatal(err)
		}
	}
	var got []byte
	for len(got) < 3 {
		cs, err := poll(s, 10*delay)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < delay {
			t.Errorf("a message arrived after %v with a delay of %v", d, delay)
		}
		for _, c := range cs {
			got = append(got, s.RecvBuf(c.Buf)[0])
		}
	}
	if st := r.Stats(); st.MaxInFlight != 3 {
		t.Errorf("at most %d messages were on their way at once, want 3", st.MaxInFlight)
	}
	if string(got) != "\x01\x02\x03" {
		t.Errorf("got %q", got)
	}
}
