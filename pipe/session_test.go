package pipe

import (
	"context"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// silentConn is a Conn whose peer sent one message and then fell silent,
// after bytes of it arrived: Poll returns that message once, then waits
// for its context, recording each deadline it was given.
type silentConn struct {
	conn.Conn
	polled    int
	deadlines []time.Time
}

func (c *silentConn) Poll(ctx context.Context, cs []conn.Completion) (int, error) {
	if c.polled++; c.polled == 1 {
		cs[0] = conn.Completion{Op: conn.OpRecv, Len: 1}
		return 1, nil
	}
	d, _ := ctx.Deadline()
	c.deadlines = append(c.deadlines, d)
	<-ctx.Done()
	return 0, ctx.Err()
}

func (c *silentConn) Progress() int64 { return 100 }

func (c *silentConn) Info() conn.Info { return conn.Info{Remote: "silent"} }

// TestSilenceFromLastWord checks that the idle timeout counts from the
// peer's last message: bytes that arrived before it do not count as a sign
// of life later (they once stretched the timeout by up to its length).
func TestSilenceFromLastWord(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	c := &silentConn{}
	s := newSession(c, timeouts{silence: timeout}, "sender")
	defer s.release()
	s.heard.Store(time.Now().Add(-timeout / 2).UnixNano()) // the stream began a while ago
	if _, err := s.poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	last := s.lastHeard()
	_, err := s.poll(t.Context())
	if conn.KindOf(err) != conn.KindAborted {
		t.Fatalf("poll: %v, want the silence reported", err)
	}
	for i, d := range c.deadlines {
		if d.After(last.Add(timeout)) {
			t.Errorf("wait %d had its deadline %v after the last word, want at most %v", i, d.Sub(last), timeout)
		}
	}
}

// movingConn is a Conn on which no message comes, but bytes move for the
// first moves times it is asked (conn.ProgressCounter); Poll waits for
// its context, recording when it was called and the deadline it got.
type movingConn struct {
	conn.Conn
	moves, asked int
	calls        []time.Time
	deadlines    []time.Time
}

func (c *movingConn) Poll(ctx context.Context, cs []conn.Completion) (int, error) {
	d, _ := ctx.Deadline()
	c.calls, c.deadlines = append(c.calls, time.Now()), append(c.deadlines, d)
	<-ctx.Done()
	return 0, ctx.Err()
}

func (c *movingConn) Progress() int64 {
	c.asked++
	return int64(min(c.asked, c.moves))
}

func (c *movingConn) Info() conn.Info { return conn.Info{Remote: "moving"} }

// TestProgressAskedOften checks that the idle timeout asks a connection
// that can tell progress at least every beat interval: bytes that moved
// count from at most that long after they did, so that a peer that stops
// is given up within the timeout and one interval, not up to two
// timeouts. It is given up once its bytes stop.
func TestProgressAskedOften(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	c := &movingConn{moves: 3}
	s := newSession(c, timeouts{silence: timeout}, "receiver")
	defer s.release()
	_, err := s.poll(t.Context())
	if conn.KindOf(err) != conn.KindAborted {
		t.Fatalf("poll: %v, want the silence reported", err)
	}
	if c.asked < c.moves {
		t.Errorf("progress asked %d times, want at least %d (it moved until then)", c.asked, c.moves)
	}
	for i := range c.calls {
		if wait := c.deadlines[i].Sub(c.calls[i]); wait > beatInterval(timeout) {
			t.Errorf("wait %d was given %v, want at most the beat interval %v", i, wait, beatInterval(timeout))
		}
	}
}

func TestCreditBatch(t *testing.T) {
	t.Parallel()
	cases := []struct{ chunk, credits, want int }{
		{4 << 20, 7, 1},     // large chunks: one credit per message
		{1 << 20, 127, 1},   // a chunk is all a batch may hold back
		{64 << 10, 7, 1},    // a shallow window keeps every credit moving
		{64 << 10, 127, 16}, // 1 MiB of 64 KiB chunks
		{4096, 63, 15},      // a quarter of the window
		{1, 3, 1},
	}
	for _, c := range cases {
		if got := creditBatch(c.chunk, c.credits); got != c.want {
			t.Errorf("creditBatch(%d, %d) = %d, want %d", c.chunk, c.credits, got, c.want)
		}
	}
}
