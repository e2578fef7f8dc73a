package pipe_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
)

// result is how one stream ended on both sides.
type result struct {
	send, recv       pipe.Stats
	sendErr, recvErr error
	sender, receiver *memconn.Conn
	out              *testutil.Buffer // locked: a receiver may still write to it after a failed stream
}

// stream runs a sender and a receiver over a memconn pair.
type stream struct {
	proposal, local conn.Params
	faults          memconn.Faults
	sendCfg         pipe.SendConfig
	recvCfg         pipe.ReceiveConfig
	out             io.Writer // defaults to a testutil.Buffer
}

func (s stream) run(t *testing.T, ctx context.Context, in io.Reader) result {
	t.Helper()
	if s.proposal == (conn.Params{}) {
		s.proposal = conn.NewParams(4096, 4)
	}
	if s.local == (conn.Params{}) {
		s.local = s.proposal
	}
	sc, rc, err := memconn.Pair(s.proposal, s.local, s.faults)
	if err != nil {
		t.Fatal(err)
	}
	res := result{sender: sc, receiver: rc, out: &testutil.Buffer{}}
	out := s.out
	if out == nil {
		out = res.out
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		res.send, res.sendErr = pipe.Send(ctx, sc, in, s.sendCfg)
		sc.Close()
	}()
	go func() {
		defer wg.Done()
		res.recv, res.recvErr = pipe.Receive(ctx, rc, out, s.recvCfg)
		rc.Close()
	}()
	wg.Wait()
	return res
}

// checkCredits fails the test if either end saw a credit violation or the
// sender had more data messages in flight than the credits of depth.
func (r result) checkCredits(t *testing.T, depth int) {
	t.Helper()
	ss, rs := r.sender.Stats(), r.receiver.Stats()
	if ss.Violations != 0 || rs.Violations != 0 {
		t.Errorf("credit violations: sender end %d, receiver end %d", ss.Violations, rs.Violations)
	}
	if credits := conn.NewParams(1, depth).Credits(); ss.MaxDataInFlight > credits {
		t.Errorf("sender had %d data messages in flight, depth %d gives %d credits", ss.MaxDataInFlight, depth, credits)
	}
	if ss.MaxInFlight > r.receiver.RecvBufs() {
		t.Errorf("sender had %d messages in flight, the receiver posted %d buffers", ss.MaxInFlight, r.receiver.RecvBufs())
	}
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(b)
	return b
}

func TestStreamSizes(t *testing.T) {
	// Not parallel: it takes the CPU for seconds (64 MiB in each mode).
	const chunk = 4096
	cases := []struct {
		name  string
		size  int
		chunk int
	}{
		{"empty", 0, chunk},
		{"one byte", 1, chunk},
		{"chunk-1", chunk - 1, chunk},
		{"chunk", chunk, chunk},
		{"chunk+1", chunk + 1, chunk},
		{"3chunk+7", 3*chunk + 7, chunk},
		{"64MiB", 64 << 20, 1 << 20},
		{"1-byte chunks", 1000, 1},
	}
	modes := []struct {
		name    string
		key     string
		encrypt bool
	}{{"xxh3", "", false}, {"aes-gmac", "k3y", false}, {"aes-256-gcm", "k3y", true}}
	for _, tc := range cases {
		for _, m := range modes {
			t.Run(tc.name+"/"+m.name, func(t *testing.T) {
				in := randomBytes(tc.size, uint64(tc.size))
				cfg := pipe.SendConfig{Key: []byte(m.key), Encrypt: m.encrypt}
				s := stream{proposal: conn.NewParams(tc.chunk, 4), sendCfg: cfg, recvCfg: pipe.ReceiveConfig{Key: cfg.Key}}
				r := s.run(t, context.Background(), bytes.NewReader(in))
				if r.sendErr != nil || r.recvErr != nil {
					t.Fatalf("send: %v; receive: %v", r.sendErr, r.recvErr)
				}
				if got := r.out.Bytes(); !bytes.Equal(got, in) {
					t.Fatalf("received %d bytes, want %d identical ones", len(got), len(in))
				}
				if r.send.Sum != r.recv.Sum || (r.send.Sum == 0) != (m.key != "") || r.send.Bytes != int64(len(in)) || r.recv.Bytes != int64(len(in)) {
					t.Errorf("stats: sent %d bytes sum %016x, received %d sum %016x; want %d, the same sum, 0 only with a key",
						r.send.Bytes, r.send.Sum, r.recv.Bytes, r.recv.Sum, len(in))
				}
				if r.send.Integrity != m.name || r.recv.Integrity != m.name {
					t.Errorf("stats: integrity %q (sender), %q (receiver), want %q", r.send.Integrity, r.recv.Integrity, m.name)
				}
				r.checkCredits(t, 4)
			})
		}
	}
}

// TestEncryptedOnTheWire checks that an encrypted stream's payloads travel
// as ciphertext: no data message the receiver's end gets holds a window of
// the input, and yet the output is exact.
func TestEncryptedOnTheWire(t *testing.T) {
	t.Parallel()
	in := bytes.Repeat([]byte("plain text that must not travel as such. "), 1000)
	p := conn.NewParams(4096, 4)
	sc, rc, err := memconn.Pair(p, p, memconn.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := pipe.SendConfig{Key: []byte("k3y"), Encrypt: true}
	sent := make(chan error, 1)
	go func() {
		_, err := pipe.Send(context.Background(), sc, bytes.NewReader(in), cfg)
		sent <- err
	}()
	spy := &spyConn{Conn: rc}
	var out testutil.Buffer
	if _, err := pipe.Receive(context.Background(), spy, &out, pipe.ReceiveConfig{Key: cfg.Key, Encrypt: true}); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Fatal("output differs from input")
	}
	if spy.data == 0 || spy.plain != 0 {
		t.Errorf("%d of %d data messages held plain text", spy.plain, spy.data)
	}
}

// TestEncryptionRefused checks the encryption settings that cannot stream:
// a sender that encrypts without a key, and a receiver that requires
// encryption from a sender that does not encrypt.
func TestEncryptionRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name               string
		send               pipe.SendConfig
		recv               pipe.ReceiveConfig
		sendKind, recvKind conn.Kind
		sendSays, recvSays string
	}{
		{"encrypt without a key", pipe.SendConfig{Encrypt: true}, pipe.ReceiveConfig{},
			conn.KindUsage, conn.KindSetup, "encryption needs a shared key", ""},
		{"receiver requires encryption", pipe.SendConfig{Key: []byte("k")}, pipe.ReceiveConfig{Key: []byte("k"), Encrypt: true},
			conn.KindAuth, conn.KindAuth, "accepts only encrypted streams", "accepts only encrypted streams"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stream{sendCfg: tc.send, recvCfg: tc.recv}
			s.sendCfg.HandshakeTimeout, s.recvCfg.HandshakeTimeout = time.Second, time.Second
			r := s.run(t, context.Background(), bytes.NewReader([]byte("data")))
			checkErr(t, "sender", r.sendErr, tc.sendKind, tc.sendSays)
			checkErr(t, "receiver", r.recvErr, tc.recvKind, tc.recvSays)
			if len(r.out.Bytes()) != 0 {
				t.Errorf("the receiver wrote %q", r.out.Bytes())
			}
		})
	}
}

// spyConn counts the data messages that arrive, and those whose payload
// holds the plain text TestEncryptedOnTheWire sends.
type spyConn struct {
	*memconn.Conn
	data, plain int
}

func (c *spyConn) Poll(ctx context.Context, cs []conn.Completion) (int, error) {
	n, err := c.Conn.Poll(ctx, cs)
	for _, cp := range cs[:n] {
		msg := c.RecvBuf(cp.Buf)[:cp.Len]
		if cp.Op == conn.OpRecv && typeOf(msg) == 'D' {
			c.data++
			if bytes.Contains(msg, []byte("must not travel")) {
				c.plain++
			}
		}
	}
	return n, err
}

func TestNegotiatedParams(t *testing.T) {
	t.Parallel()
	in := randomBytes(100000, 1)
	s := stream{proposal: conn.NewParams(8192, 8), local: conn.NewParams(1000, 3)}
	r := s.run(t, context.Background(), bytes.NewReader(in))
	if r.sendErr != nil || r.recvErr != nil {
		t.Fatalf("send: %v; receive: %v", r.sendErr, r.recvErr)
	}
	for _, info := range []conn.Info{r.send.Info, r.recv.Info} {
		if info.Chunk != 1000 || info.Depth != 3 {
			t.Errorf("%s negotiated chunk %d depth %d, want 1000 and 3", info.Local, info.Chunk, info.Depth)
		}
	}
	if r.send.Messages != 100 {
		t.Errorf("sent %d data messages, want 100 of 1000 bytes", r.send.Messages)
	}
	if !bytes.Equal(r.out.Bytes(), in) {
		t.Fatal("data differs")
	}
	r.checkCredits(t, 3)
}

// Messages from the sender are numbered from 1: the authentication message,
// then data, then the end of the stream. From the receiver: hello, welcome,
// then credits.
func TestFaults(t *testing.T) {
	t.Parallel()
	in := randomBytes(10*4096, 2)
	cases := []struct {
		name               string
		faults             memconn.Faults
		sendKind, recvKind conn.Kind
		recvSays, sendSays string
	}{
		{"delay", memconn.Faults{Delay: time.Millisecond}, 0, 0, "", ""},
		{"data message dropped", memconn.Faults{DropAt: 4}, conn.KindIntegrity, conn.KindIntegrity, "lost or reordered", "receiver aborted"},
		{"end message dropped", memconn.Faults{DropAt: 12}, conn.KindIntegrity, conn.KindIntegrity, "messages were lost", "receiver aborted"},
		{"data corrupted", memconn.Faults{CorruptAt: 5}, conn.KindIntegrity, conn.KindIntegrity, "checksum mismatch", "checksum mismatch"},
		{"cut mid-stream", memconn.Faults{CutAt: 6}, conn.KindAborted, conn.KindAborted, "truncated after", "connection to receiver"},
		{"credits cut", memconn.Faults{Reverse: &memconn.Faults{CutAt: 4}}, conn.KindAborted, conn.KindAborted, "truncated after", "connection to receiver"},
		{"hello lost", memconn.Faults{Reverse: &memconn.Faults{DropAt: 1}}, conn.KindSetup, conn.KindAborted, "no word from the sender", "receiver refused the connection: \"wait for sender: no word from the sender"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The receiver gives up first, so that the sender hears why.
			s := stream{faults: tc.faults, sendCfg: pipe.SendConfig{Timeout: 1500 * time.Millisecond}, recvCfg: pipe.ReceiveConfig{Timeout: time.Second}}
			r := s.run(t, context.Background(), bytes.NewReader(in))
			checkErr(t, "sender", r.sendErr, tc.sendKind, tc.sendSays)
			checkErr(t, "receiver", r.recvErr, tc.recvKind, tc.recvSays)
			if r.recvErr == nil && !bytes.Equal(r.out.Bytes(), in) {
				t.Error("the receiver succeeded with different data")
			}
			if tc.faults.DropAt == 0 {
				r.checkCredits(t, 4)
			}
		})
	}
}

// checkErr checks that err is nil when kind is 0, else an error of kind
// whose text contains says.
func checkErr(t *testing.T, who string, err error, kind conn.Kind, says string) {
	t.Helper()
	if kind == 0 {
		if err != nil {
			t.Errorf("%s: unexpected error %v", who, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: no error, want %v", who, kind)
		return
	}
	if got := conn.KindOf(err); got != kind {
		t.Errorf("%s: error kind %v, want %v: %v", who, got, kind, err)
	}
	if !strings.Contains(err.Error(), says) {
		t.Errorf("%s: error %q does not say %q", who, err, says)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name               string
		sendKey, recvKey   string
		kind               conn.Kind
		sendSays, recvSays string
	}{
		{"no keys", "", "", 0, "", ""},
		{"same key", "k1", "k1", 0, "", ""},
		{"wrong key", "k1", "k2", conn.KindAuth, "key is wrong", "key is wrong"},
		{"sender has none", "", "k1", conn.KindAuth, "requires a shared key", "requires a shared key"},
		{"receiver has none", "k1", "", conn.KindAuth, "receiver has none", "receiver has none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stream{sendCfg: pipe.SendConfig{Key: []byte(tc.sendKey)}, recvCfg: pipe.ReceiveConfig{Key: []byte(tc.recvKey)}}
			r := s.run(t, context.Background(), strings.NewReader("payload"))
			checkErr(t, "sender", r.sendErr, tc.kind, tc.sendSays)
			checkErr(t, "receiver", r.recvErr, tc.kind, tc.recvSays)
			if tc.kind != 0 && len(r.out.Bytes()) != 0 {
				t.Errorf("unauthenticated data was written: %q", r.out.Bytes())
			}
		})
	}
}

// TestInteractive checks that what the sender has read goes out at once
// when its input stalls, rather than waiting for a full chunk.
func TestInteractive(t *testing.T) {
	t.Parallel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan result, 1)
	go func() { done <- stream{out: outW}.run(t, context.Background(), inR) }()
	for _, line := range []string{"first\n", "second\n"} {
		inW.Write([]byte(line))
		buf := make([]byte, len(line))
		if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != line {
			t.Fatalf("read %q (%v), want %q", buf, err, line)
		}
	}
	inW.Close()
	go io.Copy(io.Discard, outR)
	r := <-done
	if r.sendErr != nil || r.recvErr != nil {
		t.Fatalf("send: %v; receive: %v", r.sendErr, r.recvErr)
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after < len(p) {
		return 0, errors.New("disk on fire")
	}
	w.after -= len(p)
	return len(p), nil
}

type failingReader struct{ r io.Reader }

func (f failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, errors.New("input device gone")
	}
	return n, err
}

func TestIOFailures(t *testing.T) {
	t.Parallel()
	in := randomBytes(20*4096, 3)
	t.Run("output fails", func(t *testing.T) {
		t.Parallel()
		r := stream{out: &failingWriter{after: 3 * 4096}}.run(t, context.Background(), bytes.NewReader(in))
		checkErr(t, "receiver", r.recvErr, conn.KindAborted, "disk on fire")
		checkErr(t, "sender", r.sendErr, conn.KindAborted, `receiver aborted: "write output: disk on fire`)
	})
	t.Run("input fails", func(t *testing.T) {
		t.Parallel()
		r := stream{}.run(t, context.Background(), failingReader{bytes.NewReader(in)})
		checkErr(t, "sender", r.sendErr, conn.KindAborted, "input device gone")
		checkErr(t, "receiver", r.recvErr, conn.KindAborted, `sender aborted: "read input`)
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	arrived := &firstWrite{first: make(chan struct{})}
	inR, inW := io.Pipe()
	defer inW.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan result, 1)
	go func() {
		sc, rc, err := memconn.Pair(conn.NewParams(4096, 4), conn.NewParams(4096, 4), memconn.Faults{})
		if err != nil {
			panic(err)
		}
		var res result
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.recv, res.recvErr = pipe.Receive(context.Background(), rc, arrived, pipe.ReceiveConfig{})
		}()
		res.send, res.sendErr = pipe.Send(ctx, sc, inR, pipe.SendConfig{})
		wg.Wait()
		done <- res
	}()
	inW.Write([]byte("some"))
	<-arrived.first // the stream flows: the handshake is behind it
	cancel(conn.Errorf(conn.KindAborted, "", "interrupted by test"))
	r := <-done
	checkErr(t, "sender", r.sendErr, conn.KindAborted, "interrupted by test")
	checkErr(t, "receiver", r.recvErr, conn.KindAborted, `sender aborted: "interrupted by test"`)
}

// TestHeartbeats checks that an idle but live stream outlasts the timeout:
// the input pauses until the sender has sent enough heartbeats to span
// more than a Timeout (they are at least Timeout/4 apart), on a link
// without delay and on one with a delay each way (heartbeats must then
// wait for their answers, not pile up in the receiver's spares).
func TestHeartbeats(t *testing.T) {
	// Not parallel: its timeout must not fire while other tests take the CPU.
	const beats = 8
	for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("delay %v", delay), func(t *testing.T) {
			p := conn.NewParams(4096, 4)
			sc, rc := memPair(t, p, p, memconn.Faults{Delay: delay, Reverse: &memconn.Faults{Delay: delay}})
			inR, inW := io.Pipe()
			go func() {
				inW.Write([]byte("before"))
				base := sc.Stats().Sent
				for sc.Stats().Sent < base+beats {
					time.Sleep(time.Millisecond) // polling the condition
				}
				inW.Write([]byte(" after"))
				inW.Close()
			}()
			// Long enough that a loaded machine (the race detector, other
			// packages' tests beside it) delays no heartbeat by as much.
			const timeout = time.Second
			var out testutil.Buffer
			var recvErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				_, recvErr = pipe.Receive(context.Background(), rc, &out, pipe.ReceiveConfig{Timeout: timeout})
			})
			_, sendErr := pipe.Send(context.Background(), sc, inR, pipe.SendConfig{Timeout: timeout})
			wg.Wait()
			if sendErr != nil || recvErr != nil {
				t.Fatalf("send: %v; receive: %v", sendErr, recvErr)
			}
			if got := string(out.Bytes()); got != "before after" {
				t.Fatalf("received %q", got)
			}
			if v := rc.Stats().Violations; v != 0 {
				t.Errorf("%d messages found no spare", v)
			}
		})
	}
}

// firstWrite is an output that discards what it is given and closes first
// at the first write.
type firstWrite struct {
	first chan struct{}
	once  sync.Once
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.once.Do(func() { close(f.first) })
	return len(p), nil
}

// gatedWriter lets each Write through only once the receiver's end holds
// window messages beyond those written (or the stream's total), so that
// arrivals queue up behind the writer. A Write fails if they do not come
// within gateWait: the sender stopped short of the window.
type gatedWriter struct {
	out     bytes.Buffer
	rc      *memconn.Conn
	window  int
	total   int
	written int
}

// gateWait bounds a gatedWriter's wait for arrivals that a working sender
// makes at once (the memconn pair has no delay).
const gateWait = 30 * time.Second

func (g *gatedWriter) Write(p []byte) (int, error) {
	want := min(g.written+g.window, g.total)
	deadline := time.Now().Add(gateWait)
	for g.rc.Stats().Received < want {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("gave up waiting %v for message %d at the receiver's end (%d arrived): the sender stopped short of %d messages ahead of the writer",
				gateWait, want, g.rc.Stats().Received, g.window)
		}
		time.Sleep(100 * time.Microsecond)
	}
	g.written++
	return g.out.Write(p)
}

// TestCreditBatches streams small chunks through a deep window with a
// writer that lags behind: the receiver returns its credits several to a
// message, and the stream still arrives whole.
func TestCreditBatches(t *testing.T) {
	t.Parallel()
	const chunk, depth, size = 4096, 64, 1 << 20
	p := conn.NewParams(chunk, depth)
	sc, rc := memPair(t, p, p, memconn.Faults{})
	in := randomBytes(size, 7)
	// Half the window: the credits a batch holds back shrink the sender's.
	// The total counts the sender's authentication, the data and the end.
	g := &gatedWriter{rc: rc, window: 1 + p.Credits()/2, total: 1 + size/chunk + 1}
	errs := make(chan error, 1)
	go func() {
		_, err := pipe.Send(context.Background(), sc, bytes.NewReader(in), pipe.SendConfig{})
		errs <- err
	}()
	if _, err := pipe.Receive(context.Background(), rc, g, pipe.ReceiveConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.out.Bytes(), in) {
		t.Fatalf("received %d bytes, want %d identical ones", g.out.Len(), size)
	}
	data, msgs := size/chunk, rc.Stats().Sent
	if msgs > data*3/4 {
		t.Errorf("the receiver sent %d messages for %d data messages: credits were not batched", msgs, data)
	}
}

func TestGauges(t *testing.T) {
	t.Parallel()
	in := randomBytes(64*4096, 9)
	sg, rg := &pipe.Gauges{}, &pipe.Gauges{}
	out := testutil.NewHeldWriter()
	go func() {
		// Both sides stall while the output is held: the receiver's
		// arrivals queue up and the sender runs out of credits.
		for sg.Stalls() == 0 || rg.Stalls() == 0 || sg.InFlight() == 0 || rg.InFlight() == 0 {
			runtime.Gosched()
		}
		close(out.Release)
	}()
	r := stream{out: out, sendCfg: pipe.SendConfig{Gauges: sg}, recvCfg: pipe.ReceiveConfig{Gauges: rg}}.run(t, context.Background(), bytes.NewReader(in))
	if r.sendErr != nil || r.recvErr != nil {
		t.Fatalf("send: %v; receive: %v", r.sendErr, r.recvErr)
	}
	if !bytes.Equal(out.Out.Bytes(), in) {
		t.Fatalf("received %d bytes, want %d identical ones", len(out.Out.Bytes()), len(in))
	}
	if sg.Bytes() != int64(len(in)) || rg.Bytes() != int64(len(in)) {
		t.Errorf("gauges count %d bytes sent and %d written, want %d", sg.Bytes(), rg.Bytes(), len(in))
	}
	if rg.InFlight() != 0 {
		t.Errorf("%d arrivals still wait for the writer after the stream", rg.InFlight())
	}
	var none *pipe.Gauges
	if none.Bytes() != 0 || none.InFlight() != 0 || none.Stalls() != 0 {
		t.Error("a nil *Gauges does not read as zero")
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		sendKey, recvKey  string
		kind              conn.Kind
		probeErr, recvErr string
	}{
		{name: "no key"},
		{name: "same key", sendKey: "k1", recvKey: "k1"},
		{name: "wrong key", sendKey: "k1", recvKey: "k2", kind: conn.KindAuth, probeErr: "receiver refused the connection", recvErr: "the sender's key is wrong"},
		{name: "key missing", recvKey: "k2", kind: conn.KindAuth, probeErr: "requires a shared key", recvErr: "sender refused the connection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := conn.NewParams(4096, 4)
			sc, rc := memPair(t, p, p, memconn.Faults{})
			out := &testutil.Buffer{}
			recvErr := make(chan error, 1)
			go func() {
				_, err := pipe.Receive(context.Background(), rc, out, pipe.ReceiveConfig{Key: []byte(tt.recvKey)})
				recvErr <- err
			}()
			_, err := pipe.Probe(context.Background(), sc, pipe.SendConfig{Key: []byte(tt.sendKey)})
			sc.Close()
			rerr := <-recvErr
			if tt.probeErr == "" {
				if err != nil {
					t.Fatalf("probe: %v", err)
				}
				if !errors.Is(rerr, pipe.ErrProbe) {
					t.Fatalf("receiver: %v, want pipe.ErrProbe", rerr)
				}
			} else {
				checkErr(t, "probe", err, tt.kind, tt.probeErr)
				checkErr(t, "receiver", rerr, tt.kind, tt.recvErr)
			}
			if len(out.Bytes()) != 0 {
				t.Errorf("the receiver wrote %d bytes for a probe", len(out.Bytes()))
			}
		})
	}
}

// pinningConn reports memory pinned once its window is open, as the rdma
// transport does.
type pinningConn struct {
	*memconn.Conn
	opened atomic.Bool
}

func (c *pinningConn) OpenWindow() ([]byte, error) {
	c.opened.Store(true)
	return c.Conn.OpenWindow()
}

func (c *pinningConn) Info() conn.Info {
	i := c.Conn.Info()
	if c.opened.Load() {
		i.Pinned = 1 << 20
	}
	return i
}

// TestStatsAfterWindow checks that a receiver's Stats describe the
// connection as the stream found it, its window (and what it pinned)
// included, not as it was before the handshake opened it.
func TestStatsAfterWindow(t *testing.T) {
	t.Parallel()
	p := conn.NewParams(4096, 4)
	sc, rc := memPair(t, p, p, memconn.Faults{})
	go pipe.Send(context.Background(), sc, bytes.NewReader([]byte("data")), pipe.SendConfig{})
	st, err := pipe.Receive(context.Background(), &pinningConn{Conn: rc}, io.Discard, pipe.ReceiveConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Info.Pinned != 1<<20 {
		t.Errorf("Stats.Info.Pinned = %d, want what the open window pinned", st.Info.Pinned)
	}
}
