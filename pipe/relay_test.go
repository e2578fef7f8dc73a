package pipe_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// hop is one receiver of a chain.
type hop struct {
	params conn.Params // of its connection from the previous side
	key    string
	out    io.Writer      // nil: a testutil.Buffer
	faults memconn.Faults // of its connection from the previous side
}

// chainResult is what every side of a chain reported.
type chainResult struct {
	sendErr   error
	receivers int                // that confirmed the stream, as the sender counts them
	outs      []*testutil.Buffer // nil where the hop had its own writer
	errs      []error
	ios       []string // Stats.IO of each hop
}

// runChain streams in from a sender (with key) through hops: each hop but
// the last forwards to the next one over a memconn pair.
func runChain(t *testing.T, in []byte, key string, hops []hop) chainResult {
	t.Helper()
	var chain []string
	for i := 1; i < len(hops); i++ {
		chain = append(chain, fmt.Sprintf("hop%d", i))
	}
	return runChainWith(t, in, pipe.SendConfig{Key: []byte(key)}, hops, chain, false)
}

// relayAnywhere is a RelayConfig.Allow that relays to any receiver named.
func relayAnywhere(_ context.Context, next string) (string, error) { return next, nil }

// runChainWith streams in from a sender with sendCfg through hops: the
// sender names chain, or, with fixed, each hop forwards to the next by its
// own RelayConfig.To, with the next hop's key as its Key where it differs.
func runChainWith(t testing.TB, in []byte, sendCfg pipe.SendConfig, hops []hop, chain []string, fixed bool) chainResult {
	t.Helper()
	res := chainResult{outs: make([]*testutil.Buffer, len(hops)), errs: make([]error, len(hops)), ios: make([]string, len(hops))}
	ctx := context.Background()
	var wg sync.WaitGroup
	// senders[i] is the dialing end of the connection into hop i.
	senders := make([]conn.Conn, len(hops))
	receivers := make([]conn.Conn, len(hops))
	for i, h := range hops {
		sc, rc, err := memconn.Pair(h.params, h.params, h.faults)
		if err != nil {
			t.Fatal(err)
		}
		senders[i], receivers[i] = sc, rc
	}
	for i, h := range hops {
		out := h.out
		if out == nil {
			res.outs[i] = &testutil.Buffer{}
			out = res.outs[i]
		}
		cfg := pipe.ReceiveConfig{Key: []byte(h.key), Relay: pipe.RelayConfig{Allow: relayAnywhere, Dial: func(_ context.Context, addr string) (conn.Conn, error) {
			var n int
			if _, err := fmt.Sscanf(addr, "hop%d", &n); err != nil || n < 1 || n >= len(senders) {
				return nil, fmt.Errorf("no receiver %q", addr)
			}
			return senders[n], nil
		}}}
		if fixed && i+1 < len(hops) {
			cfg.Relay.To = fmt.Sprintf("hop%d", i+1)
			if hops[i+1].key != h.key {
				cfg.Relay.Key = []byte(hops[i+1].key)
			}
		}
		wg.Go(func() {
			var st pipe.Stats
			st, res.errs[i] = pipe.Receive(ctx, receivers[i], out, cfg)
			res.ios[i] = st.IO
			receivers[i].Close()
		})
	}
	if !fixed {
		sendCfg.Chain = chain
	}
	var st pipe.Stats
	st, res.sendErr = pipe.Send(ctx, senders[0], bytes.NewReader(in), sendCfg)
	res.receivers = st.Receivers
	senders[0].Close()
	wg.Wait()
	for i := 1; i < len(hops); i++ {
		senders[i].Close() // closed by the relay already; Close is idempotent
	}
	return res
}

func TestRelay(t *testing.T) {
	t.Parallel()
	p := conn.NewParams(4096, 4)
	in := randomBytes(50*4096+123, 21)
	keyed := []hop{{params: p, key: "k"}, {params: p, key: "k"}, {params: p, key: "k"}, {params: p, key: "k"}}
	keyEach := []hop{{params: p, key: "k0"}, {params: p, key: "k1"}, {params: p, key: "k2"}}
	tests := []struct {
		name      string
		key       string
		encrypt   bool
		hops      []hop
		how       string // how the first hop relays (Stats.IO)
		fixedOnly bool   // only with RelayConfig.To (and Key)
	}{
		{"two receivers", "", false, []hop{{params: p}, {params: p}}, "zero-copy", false},
		{"four receivers, keyed", "k", false, keyed, "zero-copy", false},
		{"four receivers, encrypted", "k", true, keyed, "one copy", false},
		{"smaller chunks downstream", "", false, []hop{{params: p}, {params: conn.NewParams(1024, 3)}}, "one copy", false},
		{"smaller chunks downstream, keyed", "k", false, []hop{{params: p, key: "k"}, {params: conn.NewParams(1024, 3), key: "k"}}, "one copy", false},
		{"larger chunks downstream", "", false, []hop{{params: conn.NewParams(1024, 3)}, {params: conn.NewParams(8192, 8)}}, "zero-copy", false},
		{"forwards complete out of order", "k", false, []hop{{params: p, key: "k"}, {params: p, key: "k", faults: memconn.Faults{ReorderForwards: true}}, {params: p, key: "k", faults: memconn.Faults{ReorderForwards: true}}}, "zero-copy", false},
		{"a key for each hop", "k0", false, keyEach, "zero-copy", true},
		{"a key for each hop, encrypted", "k0", true, keyEach, "one copy", true},
	}
	for _, tt := range tests {
		for _, fixed := range []bool{false, true} {
			if tt.fixedOnly && !fixed {
				continue
			}
			t.Run(fmt.Sprintf("%s/fixed=%v", tt.name, fixed), func(t *testing.T) {
				t.Parallel()
				var chain []string
				for i := 1; i < len(tt.hops); i++ {
					chain = append(chain, fmt.Sprintf("hop%d", i))
				}
				r := runChainWith(t, in, pipe.SendConfig{Key: []byte(tt.key), Encrypt: tt.encrypt}, tt.hops, chain, fixed)
				checkChainResult(t, r, in, len(tt.hops))
				if !strings.HasSuffix(r.ios[0], tt.how) {
					t.Errorf("the first hop relayed with %q, want %q", r.ios[0], tt.how)
				}
			})
		}
	}
}

// checkChainResult fails the test unless every side succeeded and every
// receiver wrote in.
func checkChainResult(t *testing.T, r chainResult, in []byte, hops int) {
	t.Helper()
	if r.sendErr != nil {
		t.Fatalf("send: %v", r.sendErr)
	}
	if r.receivers != hops {
		t.Errorf("the sender counted %d receivers, want %d", r.receivers, hops)
	}
	for i := range hops {
		if r.errs[i] != nil {
			t.Errorf("hop %d: %v", i, r.errs[i])
		}
		if !bytes.Equal(r.outs[i].Bytes(), in) {
			t.Errorf("hop %d wrote %d bytes, want %d identical ones", i, len(r.outs[i].Bytes()), len(in))
		}
	}
}

func TestRelayFailures(t *testing.T) {
	t.Parallel()
	p := conn.NewParams(4096, 4)
	in := randomBytes(50*4096, 22)
	tests := []struct {
		name     string
		hops     []hop
		sendKind conn.Kind
		sendSays string
		hopSays  []string // what each hop's error says
	}{
		{
			"last receiver's output fails",
			[]hop{{params: p}, {params: p}, {params: p, out: &failingWriter{after: 5 * 4096}}},
			conn.KindAborted, `forward to hop1: `,
			[]string{"forward to hop1", "forward to hop2", "disk on fire"},
		},
		{
			"middle receiver's output fails",
			[]hop{{params: p}, {params: p, out: &failingWriter{after: 5 * 4096}}, {params: p}},
			conn.KindAborted, `forward to hop1: next receiver hop1 aborted: \"write output: disk on fire`,
			[]string{"forward to hop1", "disk on fire", `sender aborted: "write output: disk on fire`},
		},
		{
			"next receiver has another key",
			[]hop{{params: p, key: "k"}, {params: p, key: "other"}},
			conn.KindAuth, `forward to hop1: it does not hold the same key`,
			[]string{"forward to hop1: next receiver hop1 refused the connection: \"authenticate: the sender's key is wrong", "the sender's key is wrong"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runChain(t, in, tt.hops[0].key, tt.hops)
			checkErr(t, "sender", r.sendErr, tt.sendKind, tt.sendSays)
			for i, says := range tt.hopSays {
				if r.errs[i] == nil {
					t.Errorf("hop %d succeeded; want an error that says %q", i, says)
					continue
				}
				var pe *conn.Error
				if !errors.As(r.errs[i], &pe) || !bytes.Contains([]byte(r.errs[i].Error()), []byte(says)) {
					t.Errorf("hop %d: error %q does not say %q", i, r.errs[i], says)
				}
			}
		})
	}
}

func TestChainMessages(t *testing.T) {
	t.Parallel()
	p := conn.NewParams(4096, 4)
	in := randomBytes(10*4096+1, 23)
	hops := []hop{{params: p}, {params: p}, {params: p}, {params: p}}
	t.Run("names longer than one message", func(t *testing.T) {
		t.Parallel()
		pad := strings.Repeat("x", 200)
		r := runChainWith(t, in, pipe.SendConfig{}, hops, []string{"hop1." + pad, "hop2." + pad, "hop3." + pad}, false)
		checkChainResult(t, r, in, len(hops))
	})
	t.Run("the longest chain, under control credits", func(t *testing.T) {
		t.Parallel()
		// 1024 names of 255 bytes take over a thousand chain messages,
		// each sent only once the receiver has room for it; the relay
		// then fails to reach the first, which the sender must name.
		var chain []string
		for k := range 1024 {
			chain = append(chain, fmt.Sprintf("%04d.%s", k, strings.Repeat("h", 250)))
		}
		sc, rc := memPair(t, p, p, memconn.Faults{})
		recvErr := make(chan error, 1)
		go func() {
			_, err := pipe.Receive(context.Background(), rc, io.Discard, pipe.ReceiveConfig{Relay: pipe.RelayConfig{
				Allow: relayAnywhere,
				Dial: func(_ context.Context, addr string) (conn.Conn, error) {
					return nil, conn.Errorf(conn.KindSetup, "", "no route to host %s", addr[:4])
				}}})
			recvErr <- err
		}()
		_, err := pipe.Send(context.Background(), sc, bytes.NewReader(in), pipe.SendConfig{Chain: chain})
		checkErr(t, "sender", err, conn.KindSetup, "forward to "+chain[0][:61]+"...: could not connect to it")
		checkErr(t, "receiver", <-recvErr, conn.KindSetup, "forward to "+chain[0][:61]+"...: no route to host 0000")
		if v := rc.Stats().Violations; v != 0 {
			t.Errorf("%d messages found no spare", v)
		}
	})
	t.Run("a host name with a space", func(t *testing.T) {
		t.Parallel()
		sc, rc := memPair(t, p, p, memconn.Faults{})
		go pipe.Receive(context.Background(), rc, io.Discard, pipe.ReceiveConfig{})
		_, err := pipe.Send(context.Background(), sc, bytes.NewReader(in), pipe.SendConfig{Chain: []string{"bad host"}})
		checkErr(t, "sender", err, conn.KindUsage, "cannot be in one")
	})
	t.Run("a receiver that does not relay", func(t *testing.T) {
		t.Parallel()
		sc, rc := memPair(t, p, p, memconn.Faults{})
		recvErr := make(chan error, 1)
		go func() {
			_, err := pipe.Receive(context.Background(), rc, io.Discard, pipe.ReceiveConfig{})
			recvErr <- err
		}()
		_, err := pipe.Send(context.Background(), sc, bytes.NewReader(in), pipe.SendConfig{Chain: []string{"hop1"}})
		checkErr(t, "sender", err, conn.KindSetup, "this receiver does not relay")
		checkErr(t, "receiver", <-recvErr, conn.KindSetup, "does not relay")
	})
}

// TestRelayPolicy checks what a receiver does with a sender's chain it
// does not relay, and with a relay it cannot set up: the sender is told
// plainly, without the next receiver's words; no connection is made when
// the policy refuses; a failed set-up releases the claim; the set-up has
// one bound however long the chain; a sender that goes away ends it.
func TestRelayPolicy(t *testing.T) {
	t.Parallel()
	p := conn.NewParams(4096, 4)
	in := randomBytes(3*4096, 24)
	type outcome struct {
		sendKind   conn.Kind
		sendSays   string
		recvSays   string
		dialed     bool
		unclaimed  bool
		senderGone bool // the sender is cancelled once the relay dials
	}
	tests := []struct {
		name    string
		relay   func(context.Context, string) (string, error)
		forward func(ctx context.Context, addr string) (conn.Conn, error)
		want    outcome
	}{
		{
			"refused by the policy",
			func(context.Context, string) (string, error) { return "", errors.New("not in the allowlist") },
			nil,
			outcome{sendKind: conn.KindSetup, sendSays: `"this receiver does not relay to hop1"`, recvSays: "this receiver does not relay to hop1: not in the allowlist"},
		},
		{
			"the next receiver answers garbage",
			relayAnywhere,
			func(context.Context, string) (conn.Conn, error) {
				return nil, conn.Errorf(conn.KindSetup, "connect", "the peer is not an rdmapipe receiver (it answered \"SSH-2.0-OpenSSH\")")
			},
			outcome{sendKind: conn.KindSetup, sendSays: "forward to hop1: could not connect to it", recvSays: "SSH-2.0-OpenSSH", dialed: true, unclaimed: true},
		},
		{
			"the next receiver never answers: one bound",
			relayAnywhere,
			func(ctx context.Context, _ string) (conn.Conn, error) {
				<-ctx.Done()
				return nil, context.Cause(ctx)
			},
			outcome{sendKind: conn.KindSetup, sendSays: "forward to hop1: could not connect to it", recvSays: "did not complete the rdmapipe handshake within 1s", dialed: true, unclaimed: true},
		},
		{
			"the sender goes away during the set-up",
			relayAnywhere,
			func(ctx context.Context, _ string) (conn.Conn, error) {
				<-ctx.Done()
				return nil, context.Cause(ctx)
			},
			outcome{sendKind: conn.KindAborted, sendSays: "gone", recvSays: `sender refused the connection: "gone"`, dialed: true, unclaimed: true, senderGone: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sc, rc := memPair(t, p, p, memconn.Faults{})
			sendCtx, cancelSend := context.WithCancelCause(context.Background())
			defer cancelSend(nil)
			var dialed, unclaimed atomic.Bool
			// The relay's set-up has this bound, the sender twice it: the
			// relay's report of a failed set-up has the other half to
			// arrive in, which a loaded machine needs (300 ms was short
			// under -race).
			timeout := time.Second
			if tt.want.senderGone {
				timeout = time.Hour // only the sender's going can end the set-up
			}
			cfg := pipe.ReceiveConfig{
				HandshakeTimeout: timeout,
				Claim:            func() bool { return true },
				Unclaim:          func() { unclaimed.Store(true) },
				Relay: pipe.RelayConfig{
					Allow: tt.relay,
					Dial: func(ctx context.Context, addr string) (conn.Conn, error) {
						dialed.Store(true)
						if tt.want.senderGone {
							cancelSend(conn.Errorf(conn.KindAborted, "", "gone"))
						}
						return tt.forward(ctx, addr)
					},
				},
			}
			recvErr := make(chan error, 1)
			go func() {
				_, err := pipe.Receive(context.Background(), rc, io.Discard, cfg)
				recvErr <- err
			}()
			_, err := pipe.Send(sendCtx, sc, bytes.NewReader(in), pipe.SendConfig{Chain: []string{"hop1", "hop2", "hop3"}, HandshakeTimeout: timeout})
			if tt.want.senderGone {
				sc.Close()
			}
			checkErr(t, "sender", err, tt.want.sendKind, tt.want.sendSays)
			rerr := <-recvErr
			if rerr == nil || !strings.Contains(rerr.Error(), tt.want.recvSays) {
				t.Errorf("receiver: %v, want an error saying %q", rerr, tt.want.recvSays)
			}
			if err != nil && tt.want.recvSays != tt.want.sendSays && strings.Contains(err.Error(), tt.want.recvSays) && !tt.want.senderGone {
				t.Errorf("the sender was told the relay's details: %v", err)
			}
			if dialed.Load() != tt.want.dialed || unclaimed.Load() != tt.want.unclaimed {
				t.Errorf("dialed %v, unclaimed %v; want %v, %v", dialed.Load(), unclaimed.Load(), tt.want.dialed, tt.want.unclaimed)
			}
		})
	}
}
