package pipe_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	pipeauth "github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
)

// hostConn is one end of a memconn pair that belongs to a simulated host:
// named as the host it leads to, and hung with it (see simNet.hang).
type hostConn struct {
	*memconn.Conn
	remote string
	hung   context.Context // done when the host hangs
}

func (c *hostConn) Info() conn.Info {
	i := c.Conn.Info()
	i.Remote = c.remote
	return i
}

// Poll waits as memconn's does until the host hangs, then forever (until
// ctx ends): a hung host polls no more.
func (c *hostConn) Poll(ctx context.Context, cs []conn.Completion) (int, error) {
	if c.hung.Err() == nil {
		pctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(c.hung, cancel)
		n, err := c.Conn.Poll(pctx, cs)
		stop()
		cancel()
		if err == nil || c.hung.Err() == nil || ctx.Err() != nil {
			return n, err
		}
	}
	<-ctx.Done()
	return 0, context.Cause(ctx)
}

// PostSend, SendControl and PostRecv do nothing once the host hangs.
func (c *hostConn) PostSend(i, n int) error {
	if c.hung.Err() != nil {
		return nil
	}
	return c.Conn.PostSend(i, n)
}

func (c *hostConn) SendControl(ctx context.Context, p []byte) error {
	if c.hung.Err() != nil {
		return nil
	}
	return c.Conn.SendControl(ctx, p)
}

func (c *hostConn) PostRecv(i int) error {
	if c.hung.Err() != nil {
		return nil
	}
	return c.Conn.PostRecv(i)
}

// simHost is one receiver of a simulated chain.
type simHost struct {
	inbox  chan conn.Conn // connections made to it, not yet taken
	ctx    context.Context
	cancel context.CancelFunc
	hung   context.Context
	hang   context.CancelFunc
	dead   bool
	conns  []*hostConn // every end it holds
	ups    []*hostConn // the ends of its connections from upstream
}

// simNet is a network of hosts "hop0", "hop1"... in one process: a
// connection from one to another is a new memconn pair, and a host can
// die (its connections close, nothing reaches it any more) or hang.
type simNet struct {
	t      testing.TB
	params conn.Params
	mu     sync.Mutex
	hosts  []*simHost
}

func newSimNet(t testing.TB, n int, p conn.Params) *simNet {
	net := &simNet{t: t, params: p}
	for range n {
		h := &simHost{inbox: make(chan conn.Conn, 8)}
		h.ctx, h.cancel = context.WithCancel(context.Background())
		h.hung, h.hang = context.WithCancel(context.Background())
		net.hosts = append(net.hosts, h)
	}
	t.Cleanup(func() {
		for _, h := range net.hosts {
			h.cancel()
			for _, c := range h.conns {
				c.Close()
			}
		}
	})
	return net
}

// hostOf returns the index of host addr.
func hostOf(addr string) (int, bool) {
	var n int
	_, err := fmt.Sscanf(addr, "hop%d", &n)
	return n, err == nil
}

// dial connects host from (-1: the sender, which is not simulated) to
// host addr.
func (net *simNet) dial(from int, addr string) (conn.Conn, error) {
	to, ok := hostOf(addr)
	net.mu.Lock()
	defer net.mu.Unlock()
	switch {
	case !ok || to >= len(net.hosts):
		return nil, fmt.Errorf("no host %q", addr)
	case net.hosts[to].dead || from >= 0 && net.hosts[from].dead:
		return nil, conn.Errorf(conn.KindSetup, "connect "+addr, "connection refused")
	}
	sc, rc, err := memconn.Pair(net.params, net.params, memconn.Faults{})
	if err != nil {
		return nil, err
	}
	h := net.hosts[to]
	r := &hostConn{Conn: rc, remote: "sender", hung: h.hung}
	h.conns, h.ups = append(h.conns, r), append(h.ups, r)
	s := &hostConn{Conn: sc, remote: addr, hung: context.Background()}
	if from >= 0 {
		s.hung = net.hosts[from].hung
		net.hosts[from].conns = append(net.hosts[from].conns, s)
	}
	h.inbox <- r
	return s, nil
}

// kill makes host i die: nothing reaches it any more, its connections
// close, and its process ends.
func (net *simNet) kill(i int) {
	net.mu.Lock()
	h := net.hosts[i]
	h.dead = true
	conns := slices.Clone(h.conns)
	net.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	h.cancel()
}

// cut breaks the connections into host i, and only those.
func (net *simNet) cut(i int) {
	net.mu.Lock()
	ups := slices.Clone(net.hosts[i].ups)
	net.mu.Unlock()
	for _, c := range ups {
		c.Close()
	}
}

// hang makes host i hang: it polls and sends no more, and its
// connections stay up.
func (net *simNet) hang(i int) { net.hosts[i].hang() }

// simOutput is a host's output, which can stop the host when it has
// written at bytes (see simFault): its writes block until resume, then
// fail unless goOn.
type simOutput struct {
	testutil.Buffer
	at      int
	goOn    bool          // the host lives on after that
	reached chan struct{} // closed when at bytes are written
	resume  chan struct{} // closed when the host may go on
	once    sync.Once
}

func (o *simOutput) Write(p []byte) (int, error) {
	if o.at > 0 && o.Len()+len(p) >= o.at {
		o.once.Do(func() { close(o.reached) })
		<-o.resume
		if !o.goOn {
			return 0, errors.New("the host is gone")
		}
	}
	return o.Buffer.Write(p)
}

// simFault is what happens to a host once it has written at bytes.
type simFault struct {
	at   int
	hang bool // else it dies
	cut  bool // else it dies: only its connections from upstream break
	with []int
}

// simResult is how a simulated chain's stream ended.
type simResult struct {
	send pipe.Stats
	err  error
	outs []*simOutput
	errs []error
}

// sim is a simulated chain of hosts named "hop0"... (and pad), each
// with its own key, each relaying to the next with RelayConfig.To and
// Key, and with repair: every host knows the (up to window) hosts
// after its next one, and takes a stream over (ReceiveConfig.Rejoin).
type sim struct {
	hosts, window int
	params        conn.Params
	cfg           pipe.ReceiveConfig // the hosts'; the sender's from it (senderCfg)
	faults        map[int]simFault   // what happens to which host
	pad           string             // after each host's name
	file          bool               // the input is a regular file
	// named makes the sender name the chain (SendConfig.Chain), every host
	// with the same key, instead of each relaying by its RelayConfig.To.
	named bool
	// slow is how long a host's connection to a fallback (any host but
	// its next) takes to set up.
	slow time.Duration
}

// name returns host i's name.
func (sm sim) name(i int) string { return fmt.Sprintf("hop%d%s", i, sm.pad) }

// run streams in through the simulated chain.
func (sm sim) run(t *testing.T, in []byte) simResult {
	n, cfg, faults := sm.hosts, sm.cfg, sm.faults
	net := newSimNet(t, n, sm.params)
	key := func(i int) []byte {
		if sm.named {
			return []byte("the chain's key")
		}
		return []byte(fmt.Sprintf("key of hop %d", i))
	}
	fallback := func(from int) []pipe.Hop {
		var hops []pipe.Hop
		for i := from; i < min(n, from+sm.window); i++ {
			hops = append(hops, pipe.Hop{Addr: sm.name(i), Key: key(i)})
		}
		return hops
	}
	res := simResult{outs: make([]*simOutput, n), errs: make([]error, n)}
	var wg sync.WaitGroup
	for i, h := range net.hosts {
		res.outs[i] = &simOutput{reached: make(chan struct{}), resume: make(chan struct{})}
		if f, ok := faults[i]; ok {
			res.outs[i].at, res.outs[i].goOn = f.at, f.cut
		}
		hcfg := cfg
		hcfg.Key = key(i)
		hcfg.Relay.Dial = func(ctx context.Context, addr string) (conn.Conn, error) {
			if addr != sm.name(i+1) {
				select {
				case <-time.After(sm.slow):
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
			return net.dial(i, addr)
		}
		hcfg.Rejoin = func(ctx context.Context) (conn.Conn, error) {
			select {
			case c := <-h.inbox:
				return c, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		hcfg.Relay.Allow = relayAnywhere
		if i+1 < n && !sm.named {
			hcfg.Relay.To, hcfg.Relay.Key = sm.name(i+1), key(i+1)
			hcfg.Relay.Repair, hcfg.Relay.Fallback = true, fallback(i+2)
		}
		wg.Go(func() {
			var c conn.Conn
			select {
			case c = <-h.inbox:
			case <-h.ctx.Done():
				res.errs[i] = h.ctx.Err()
				return
			}
			_, res.errs[i] = pipe.Receive(h.ctx, c, res.outs[i], hcfg)
		})
	}
	for i, f := range faults {
		wg.Go(func() {
			select {
			case <-res.outs[i].reached:
			case <-net.hosts[i].ctx.Done():
				return
			}
			for _, j := range append([]int{i}, f.with...) {
				switch {
				case f.hang:
					net.hang(j)
				case f.cut:
					net.cut(j)
				default:
					net.kill(j)
				}
			}
			if !f.hang {
				close(res.outs[i].resume)
			}
		})
	}
	c, err := net.dial(-1, sm.name(0))
	if err != nil {
		t.Fatal(err)
	}
	scfg := senderCfg(cfg)
	scfg.Key, scfg.Repair, scfg.Fallback = key(0), true, fallback(1)
	if sm.named {
		scfg.Fallback = nil
		for i := 1; i < n; i++ {
			scfg.Chain = append(scfg.Chain, sm.name(i))
		}
	}
	scfg.Dial = func(_ context.Context, addr string) (conn.Conn, error) { return net.dial(-1, addr) }
	var input io.Reader = bytes.NewReader(in)
	if sm.file {
		f := fileWith(t, in, 0)
		defer func() {
			if off := offset(t, f); res.err == nil && off != int64(len(in)) {
				t.Errorf("the input file was left at %d, want its end, %d", off, len(in))
			}
		}()
		input = f
	}
	res.send, res.err = pipe.Send(context.Background(), c, input, scfg)
	c.Close()
	// The hosts that hung are still there, their output blocked: they
	// end now.
	for i, f := range faults {
		if f.hang {
			for _, j := range append([]int{i}, f.with...) {
				net.hosts[j].cancel()
			}
			close(res.outs[i].resume)
		}
	}
	wg.Wait()
	return res
}

// checkSim fails the test unless the stream succeeded with exactly the
// hosts in lost given up, every other host wrote in exactly, and those
// given up wrote a part of it at most.
func checkSim(t *testing.T, r simResult, in []byte, n int, lost []string) {
	t.Helper()
	checkSimNamed(t, r, in, n, lost, "")
}

// checkSimNamed is checkSim for hosts named with pad.
func checkSimNamed(t *testing.T, r simResult, in []byte, n int, lost []string, pad string) {
	t.Helper()
	if r.err != nil {
		for i, err := range r.errs {
			t.Logf("hop %d: %v", i, err)
		}
		t.Fatalf("send: %v", r.err)
	}
	if !slices.Equal(r.send.Lost, lost) {
		t.Errorf("lost %q, want %q", r.send.Lost, lost)
	}
	if r.send.Receivers != n-len(lost) {
		t.Errorf("the sender counted %d receivers, want %d", r.send.Receivers, n-len(lost))
	}
	for i, out := range r.outs {
		got := out.Bytes()
		if slices.Contains(lost, fmt.Sprintf("hop%d%s", i, pad)) {
			if !bytes.HasPrefix(in, got) {
				t.Errorf("hop %d, lost, wrote %d bytes that are not the start of the input", i, len(got))
			}
			continue
		}
		if r.errs[i] != nil || !bytes.Equal(got, in) {
			t.Errorf("hop %d: %v; wrote %d bytes, want %d identical ones", i, r.errs[i], len(got), len(in))
		}
	}
}

// TestRepair streams through a 4-host keyed chain, a key for each hop,
// where hosts die or hang mid-stream: the hosts around them repair the
// chain, every other host writes every byte exactly once, and the sender
// names the hosts lost.
func TestRepair(t *testing.T) {
	// Not parallel: its 1 s timeouts must not fire while other tests take the CPU.
	in := randomBytes(1<<20, 41)
	cfg := pipe.ReceiveConfig{Timeout: time.Second, HandshakeTimeout: 2 * time.Second}
	tests := []struct {
		name                 string
		faults               map[int]simFault
		lost                 []string
		encrypt, file, named bool
	}{
		{"the 2nd host dies", map[int]simFault{1: {at: 256 << 10}}, []string{"hop1"}, false, false, false},
		{"the 2nd host hangs", map[int]simFault{1: {at: 256 << 10, hang: true}}, []string{"hop1"}, false, false, false},
		{"the 1st host dies: the sender repairs", map[int]simFault{0: {at: 256 << 10}}, []string{"hop0"}, false, false, false},
		{"the last host dies: nothing to repair", map[int]simFault{3: {at: 256 << 10}}, []string{"hop3"}, false, false, false},
		{"two hosts in a row die", map[int]simFault{1: {at: 256 << 10, with: []int{2}}}, []string{"hop1", "hop2"}, false, false, false},
		{"the 1st and 2nd hosts die", map[int]simFault{0: {at: 256 << 10, with: []int{1}}}, []string{"hop0", "hop1"}, false, false, false},
		{"the 2nd host dies, encrypted", map[int]simFault{1: {at: 256 << 10}}, []string{"hop1"}, true, false, false},
		{"a chain the sender names: the 2nd host dies", map[int]simFault{1: {at: 256 << 10}}, []string{"hop1"}, false, false, true},
		{"a chain the sender names: the 1st host dies", map[int]simFault{0: {at: 256 << 10}}, []string{"hop0"}, false, false, true},
		{"a chain the sender names: two hosts in a row die", map[int]simFault{1: {at: 256 << 10, with: []int{2}}}, []string{"hop1", "hop2"}, false, false, true},
		{"the 2nd host dies, then the 1st: the 3rd is taken over twice", map[int]simFault{1: {at: 256 << 10}, 0: {at: 600 << 10}}, []string{"hop0", "hop1"}, false, false, false},
		{"the 2nd host dies, then the 3rd: the 1st repairs twice", map[int]simFault{1: {at: 256 << 10}, 2: {at: 600 << 10}}, []string{"hop1", "hop2"}, false, false, false},
		{"the 1st host dies, the input a file", map[int]simFault{0: {at: 256 << 10}}, []string{"hop0"}, false, true, false},
	}
	t.Run("five hosts in a row die: their names take two lost messages", func(t *testing.T) {
		pad := "." + strings.Repeat("x", 55)
		var lost []string
		for i := 1; i <= 5; i++ {
			lost = append(lost, fmt.Sprintf("hop%d%s", i, pad))
		}
		faults := map[int]simFault{1: {at: 256 << 10, with: []int{2, 3, 4, 5}}}
		r := sim{hosts: 8, window: 6, params: conn.NewParams(4096, 4), cfg: cfg, faults: faults, pad: pad}.run(t, in)
		checkSimNamed(t, r, in, 8, lost, pad)
	})
	t.Run("the link into the 2nd host breaks", func(t *testing.T) {
		// The 2nd host waits for a rejoin that does not come (its
		// upstream gave it up), then fails, and only then does the 3rd
		// take the stream over: the 1st waits long enough for that.
		cfg := pipe.ReceiveConfig{Timeout: time.Second, HandshakeTimeout: time.Second}
		faults := map[int]simFault{1: {at: 256 << 10, cut: true}}
		r := sim{hosts: 4, window: 3, params: conn.NewParams(4096, 4), cfg: cfg, faults: faults}.run(t, in)
		checkSim(t, r, in, 4, []string{"hop1"})
		checkErr(t, "the 2nd host", r.errs[1], conn.KindAborted, "no sender took the stream over")
	})
	t.Run("the 2nd host dies, the 3rd takes longer than the timeout to reach", func(t *testing.T) {
		// The 1st host's sender must not find it silent meanwhile; the
		// 3rd waits for a takeover for the handshake timeout and more.
		cfg := pipe.ReceiveConfig{Timeout: time.Second, HandshakeTimeout: 5 * time.Second}
		faults := map[int]simFault{1: {at: 256 << 10}}
		r := sim{hosts: 4, window: 3, params: conn.NewParams(4096, 4), cfg: cfg, faults: faults, slow: 2 * cfg.Timeout}.run(t, in)
		checkSim(t, r, in, 4, []string{"hop1"})
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := cfg
			cfg.Encrypt = tt.encrypt
			r := sim{hosts: 4, window: 3, params: conn.NewParams(4096, 4), cfg: cfg, faults: tt.faults, file: tt.file, named: tt.named}.run(t, in)
			checkSim(t, r, in, 4, tt.lost)
		})
	}
}

// TestRepairRefused checks the receivers that must not be taken over: a
// rejoin without the receiver's key, and the sender's when no receiver
// is left.
func TestRepairRefused(t *testing.T) {
	t.Parallel()
	in := randomBytes(1<<20, 42)
	cfg := pipe.ReceiveConfig{Timeout: 300 * time.Millisecond, HandshakeTimeout: time.Second}
	t.Run("a rejoin without the key", func(t *testing.T) {
		t.Parallel()
		net := newSimNet(t, 2, conn.NewParams(4096, 4))
		out := &simOutput{}
		recvErr := make(chan error, 1)
		go func() {
			rcfg := cfg
			rcfg.Key = []byte("k1")
			rcfg.Rejoin = func(ctx context.Context) (conn.Conn, error) {
				select {
				case c := <-net.hosts[1].inbox:
					return c, nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
			_, err := pipe.Receive(context.Background(), <-net.hosts[1].inbox, out, rcfg)
			recvErr <- err
		}()
		c, _ := net.dial(-1, "hop1")
		scfg := senderCfg(cfg)
		scfg.Key, scfg.Fallback = []byte("k1"), []pipe.Hop{{Addr: "hop1", Key: []byte("not k1")}}
		scfg.Dial = func(_ context.Context, addr string) (conn.Conn, error) { return net.dial(-1, addr) }
		cut := &cutReader{r: bytes.NewReader(in), at: 256 << 10, cut: func() { c.Close() }}
		_, err := pipe.Send(context.Background(), c, cut, scfg)
		checkErr(t, "sender", err, conn.KindAborted, "every receiver was lost (hop1, hop1)")
		checkErr(t, "receiver", <-recvErr, conn.KindAborted, "no sender took the stream over")
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Errorf("the receiver wrote %d bytes that are not the start of the input", out.Len())
		}
	})
}

// authSpy is a sender's connection that hands over the body of the
// sender's auth message (whose stream and place a taker-over must claim).
type authSpy struct {
	*memconn.Conn
	auths chan []byte
}

func (c *authSpy) SendControl(ctx context.Context, p []byte) error {
	if body, typ, _, err := wire.ParseTrailer(p); err == nil && typ == wire.MsgAuth {
		select {
		case c.auths <- append([]byte(nil), body...):
		default:
		}
	}
	return c.Conn.SendControl(ctx, p)
}

// lostSender streams in from a keyed sender (key k) to a receiver with
// rejoins from the returned channel, and cuts the connection at cut
// bytes: the receiver's error and what it wrote come on the others, and
// the body of the sender's auth message on the last.
func lostSender(t *testing.T, in []byte, cfg pipe.ReceiveConfig, cut int) (chan<- conn.Conn, <-chan error, *testutil.Buffer, <-chan []byte) {
	t.Helper()
	p := conn.NewParams(4096, 4)
	msc, rc := memPair(t, p, p, memconn.Faults{})
	sc := &authSpy{Conn: msc, auths: make(chan []byte, 1)}
	rejoins := make(chan conn.Conn, 1)
	out := &testutil.Buffer{}
	recvErr := make(chan error, 1)
	rcfg := cfg
	rcfg.Rejoin = func(ctx context.Context) (conn.Conn, error) {
		select {
		case c := <-rejoins:
			return c, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	go func() {
		_, err := pipe.Receive(context.Background(), rc, out, rcfg)
		recvErr <- err
	}()
	go func() {
		cr := &cutReader{r: bytes.NewReader(in), at: cut, cut: func() { sc.Close() }}
		_, _ = pipe.Send(context.Background(), sc, cr, senderCfg(cfg))
	}()
	return rejoins, recvErr, out, sc.auths
}

// TestRejoinRefused offers a receiver whose sender was lost senders that
// may not take its stream over: each is refused with the right kind of
// error, and the receiver, when no other comes, fails as cut short,
// having written only the start of the stream.
func TestRejoinRefused(t *testing.T) {
	t.Parallel()
	in := randomBytes(1<<20, 43)
	cfg := pipe.ReceiveConfig{Key: []byte("k"), Timeout: 300 * time.Millisecond, HandshakeTimeout: 500 * time.Millisecond}
	tests := []struct {
		name  string
		flags byte // of the scripted sender's auth
		kind  conn.Kind
		says  string
	}{
		{"not keyed", wire.FlagRejoin, conn.KindAuth, "the sender presented no key"},
		{"a new stream", wire.FlagKey, conn.KindSetup, "does not take over the stream"},
		{"a chain", wire.FlagKey | wire.FlagRejoin | wire.FlagChain, conn.KindSetup, "does not take over the stream"},
		{"the wrong key", wire.FlagKey | wire.FlagRejoin, conn.KindAuth, "the sender's key is wrong"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rejoins, recvErr, out, _ := lostSender(t, in, cfg, 256<<10)
			p := conn.NewParams(4096, 4)
			sc, rc := memPair(t, p, p, memconn.Faults{})
			rejoins <- rc
			hostile := &peer{t: t, c: sc, cs: make([]conn.Completion, 16)}
			hostile.nextOf('H')
			hostile.control(message('K', 0, string(append([]byte{tt.flags}, make([]byte, wire.AuthBody-1)...))))
			abort := hostile.nextOf('A')
			if len(abort) < 2 || conn.Kind(abort[1]) != tt.kind || !strings.Contains(string(abort), tt.says) {
				t.Errorf("the scripted sender was told %q, want a %v saying %q", abort, tt.kind, tt.says)
			}
			checkErr(t, "receiver", <-recvErr, conn.KindAborted, "no sender took the stream over")
			if got := out.Bytes(); len(got) == 0 || !bytes.HasPrefix(in, got) {
				t.Errorf("the receiver wrote %d bytes, want the start of the stream", len(got))
			}
		})
	}
	hellos := []struct {
		name  string
		cfg   pipe.ReceiveConfig
		flags byte // of the hostile sender's auth message
		says  string
	}{
		{"a receiver without Rejoin", cfg, wire.FlagKey | wire.FlagRejoin, "the sender takes over a stream this receiver has not begun"},
		{"a chain to repair without a key", pipe.ReceiveConfig{HandshakeTimeout: time.Second}, wire.FlagChain | wire.FlagRepair, "the sender asks for a chain to be repaired without a key"},
	}
	for _, h := range hellos {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			p := conn.NewParams(4096, 4)
			sc, rc := memPair(t, p, p, memconn.Faults{})
			recvErr := make(chan error, 1)
			go func() {
				_, err := pipe.Receive(context.Background(), rc, io.Discard, h.cfg)
				recvErr <- err
			}()
			hostile := &peer{t: t, c: sc, cs: make([]conn.Completion, 16)}
			hostile.nextOf('H')
			hostile.control(message('K', 0, string(append([]byte{h.flags}, make([]byte, wire.AuthBody-1)...))))
			checkErr(t, "receiver", <-recvErr, conn.KindSetup, h.says)
		})
	}
	t.Run("a rejoin without a key", func(t *testing.T) {
		t.Parallel()
		rcfg := cfg
		rcfg.Key = nil
		rcfg.Rejoin = func(context.Context) (conn.Conn, error) { return nil, errors.New("none") }
		p := conn.NewParams(4096, 4)
		_, rc := memPair(t, p, p, memconn.Faults{})
		_, err := pipe.Receive(context.Background(), rc, io.Discard, rcfg)
		checkErr(t, "receiver", err, conn.KindUsage, "needs a shared key")
	})
	t.Run("a repair without a key", func(t *testing.T) {
		t.Parallel()
		p := conn.NewParams(4096, 4)
		sc, _ := memPair(t, p, p, memconn.Faults{})
		_, err := pipe.Send(context.Background(), sc, bytes.NewReader(in), pipe.SendConfig{Repair: true})
		checkErr(t, "sender", err, conn.KindUsage, "needs a shared key")
	})
}

// TestRejoinChecksTheWholeLength takes a stream over with a scripted
// sender that holds the key and ends the stream at once, with a total:
// the bytes written before the rejoin make it, and the stream is whole;
// or they do not, and the receiver fails with an integrity error (the
// stream's MAC, which binds the total the receiver counted, is the first
// to say so).
func TestRejoinChecksTheWholeLength(t *testing.T) {
	t.Parallel()
	in := randomBytes(1<<20, 46)
	key := []byte("k")
	cfg := pipe.ReceiveConfig{Key: key, Timeout: time.Second, HandshakeTimeout: 2 * time.Second}
	tests := []struct {
		name  string
		extra uint64 // in the end's total, beyond what the receiver wrote
		kind  conn.Kind
		says  string
	}{
		{"the total written", 0, 0, ""},
		{"more than written", 5, conn.KindIntegrity, "the stream does not match its MAC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rejoins, recvErr, out, auths := lostSender(t, in, cfg, 256<<10)
			first := <-auths
			p := conn.NewParams(4096, 4)
			sc, rc := memPair(t, p, p, memconn.Faults{})
			rejoins <- rc
			taker := &peer{t: t, c: sc, cs: make([]conn.Completion, 16)}
			tr := taker.claim(key, first[wire.AuthID:wire.AuthPlace], 1)
			welcome := taker.nextOf('W')
			if len(welcome) < 2+wire.WrittenLen {
				t.Fatalf("welcome %q", welcome)
			}
			written := binary.LittleEndian.Uint64(welcome[2:])
			total := written + tt.extra
			_, tag := seal.NewKeyed(pipeauth.StreamKey(key, tr), false).End(1, int64(total))
			end := binary.LittleEndian.AppendUint64(nil, total)
			end = append(append(end, make([]byte, 8)...), tag...)
			taker.send(0, message('E', 1, string(end)))
			err := <-recvErr
			if tt.says == "" {
				if err != nil {
					t.Errorf("receiver: %v", err)
				}
			} else {
				checkErr(t, "receiver", err, tt.kind, tt.says)
			}
			if got := out.Bytes(); written == 0 || uint64(len(got)) != written || !bytes.HasPrefix(in, got) {
				t.Errorf("the receiver wrote %d bytes (it said %d), want the start of the stream", len(got), written)
			}
		})
	}
}

// claim plays a sender that holds key and takes a stream over: after the
// receiver's hello, its auth claims stream id at place place, under a
// valid proof. It returns the handshake's transcript.
func (p *peer) claim(key, id []byte, place uint32) []byte {
	hello := p.nextOf('H')
	flags, nonce := wire.FlagKey|wire.FlagRejoin, make([]byte, 32)
	tr := pipeauth.Transcript(p.c.Info(), hello[:2+32], flags, nonce, id, place, nil)
	body := append(append([]byte{flags}, nonce...), id...)
	body = binary.LittleEndian.AppendUint32(body, place)
	p.control(message('K', 0, string(append(body, pipeauth.Proof(key, pipeauth.SenderProof, tr)...))))
	return tr
}

// TestRejoinClaimsItsStream offers a receiver whose sender was lost a
// sender that holds the key and proves it, but claims another stream, or
// the receiver's stream at another place in its chain (a takeover meant
// for another receiver, redirected here): it is refused, told why, and
// the receiver, when no other comes, fails as cut short, naming the
// refusal, with only the start of its own stream written.
func TestRejoinClaimsItsStream(t *testing.T) {
	t.Parallel()
	in := randomBytes(1<<20, 47)
	key := []byte("k")
	cfg := pipe.ReceiveConfig{Key: key, Timeout: 300 * time.Millisecond, HandshakeTimeout: 500 * time.Millisecond}
	tests := []struct {
		name  string
		id    func(first []byte) []byte
		place uint32
		says  string
	}{
		{"another stream", func([]byte) []byte { return bytes.Repeat([]byte{7}, wire.StreamIDLen) }, 1, "takes over another stream"},
		{"another place", func(first []byte) []byte { return first }, 2, "at place 2 of the chain, and this one is at place 1"},
		{"no place", func(first []byte) []byte { return first }, 0, "place 0 in the chain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rejoins, recvErr, out, auths := lostSender(t, in, cfg, 256<<10)
			first := <-auths
			if place := binary.LittleEndian.Uint32(first[wire.AuthPlace:]); place != 1 {
				t.Errorf("the first sender claims place %d, want 1", place)
			}
			p := conn.NewParams(4096, 4)
			sc, rc := memPair(t, p, p, memconn.Faults{})
			rejoins <- rc
			taker := &peer{t: t, c: sc, cs: make([]conn.Completion, 16)}
			taker.claim(key, tt.id(first[wire.AuthID:wire.AuthPlace]), tt.place)
			abort := taker.nextOf('A')
			if len(abort) < 2 || conn.Kind(abort[1]) != conn.KindSetup || !strings.Contains(string(abort), tt.says) {
				t.Errorf("the taker-over was told %q, want a setup failure saying %q", abort, tt.says)
			}
			err := <-recvErr
			checkErr(t, "receiver", err, conn.KindAborted, "no sender took the stream over")
			if err != nil && !strings.Contains(err.Error(), tt.says) {
				t.Errorf("the receiver's error %q does not say why it refused (%q)", err, tt.says)
			}
			if got := out.Bytes(); len(got) == 0 || !bytes.HasPrefix(in, got) {
				t.Errorf("the receiver wrote %d bytes, want the start of its stream", len(got))
			}
		})
	}
}

// TestTakeOverClaims takes a stream over with a scripted receiver that
// holds the key and says how much it wrote: more than was sent (as one
// that another sender fed meanwhile says) or less than the history holds
// gives it up, told why, and with no other fallback the stream fails as
// every receiver lost.
func TestTakeOverClaims(t *testing.T) {
	t.Parallel()
	in := randomBytes(1<<20, 44)
	tests := []struct {
		name    string
		written uint64
		kind    conn.Kind
		says    string
		told    string // what the scripted receiver is told
	}{
		{"more than was sent", 1 << 40, conn.KindAborted, "every receiver was lost (mem:receiver, liar)", "but only"},
		{"too far behind", 0, conn.KindAborted, "every receiver was lost (mem:receiver, liar)", "only those from"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := []byte("k")
			p := conn.NewParams(4096, 4)
			sc, rc := memPair(t, p, p, memconn.Faults{})
			go func() { _, _ = pipe.Receive(context.Background(), rc, io.Discard, pipe.ReceiveConfig{Key: key}) }()
			fsc, frc := memPair(t, p, p, memconn.Faults{})
			told := claimWritten(t, frc, key, tt.written)
			cfg := pipe.SendConfig{Key: key, Fallback: []pipe.Hop{{Addr: "liar"}},
				Dial: func(context.Context, string) (conn.Conn, error) { return fsc, nil }}
			cr := &cutReader{r: bytes.NewReader(in), at: 256 << 10, cut: func() { sc.Close() }}
			_, err := pipe.Send(context.Background(), sc, cr, cfg)
			checkErr(t, "sender", err, tt.kind, tt.says)
			if abort := <-told; !strings.Contains(string(abort), tt.told) {
				t.Errorf("the scripted receiver was told %q, want %q", abort, tt.told)
			}
		})
	}
}

// claimWritten answers a rejoin on c, with key, saying the receiver
// wrote written bytes, and sends on the channel what it is told next (an
// abort), or closes it if the handshake went wrong.
func claimWritten(t *testing.T, c *memconn.Conn, key []byte, written uint64) <-chan []byte {
	told := make(chan []byte, 1)
	go func() {
		defer close(told)
		rcv := &peer{t: t, c: c, cs: make([]conn.Completion, 16)}
		hello := append([]byte{'H', wire.FlagKey}, make([]byte, 32)...)
		rcv.control(hello)
		msg := rcv.nextFromSender('K')
		if len(msg) < wire.AuthBody {
			return
		}
		tr := pipeauth.Transcript(c.Info(), hello, msg[0], msg[wire.AuthNonce:wire.AuthID], msg[wire.AuthID:wire.AuthPlace], binary.LittleEndian.Uint32(msg[wire.AuthPlace:]), nil)
		desc, _ := c.OpenWindow()
		w := binary.LittleEndian.AppendUint64(nil, written)
		welcome := append(append([]byte{'W', wire.FlagKey}, w...), pipeauth.Proof(key, pipeauth.ReceiverProof, tr, w, desc)...)
		rcv.control(append(welcome, desc...))
		told <- rcv.nextFromSender('A')
	}()
	return told
}

// TestRelayTakeOverFedByAnother reproduces a race seen under load: a
// relay loses its next receiver before it sent it anything, and the
// fallback it takes over has meanwhile been fed by another sender (the
// stream's first sender, which took over the next receiver after giving
// the relay up for a while), so it wrote more than the relay sent. The
// relay gives that fallback up, as it cannot resume it, instead of
// failing the stream as if the fallback had broken the protocol: it goes
// on alone, and the sender counts it, naming both lost.
func TestRelayTakeOverFedByAnother(t *testing.T) {
	t.Parallel()
	in := randomBytes(1<<20, 48)
	key := []byte("k")
	p := conn.NewParams(4096, 4)
	sc, rc := memPair(t, p, p, memconn.Faults{})
	nsc, nrc := memPair(t, p, p, memconn.Faults{})
	fsc, frc := memPair(t, p, p, memconn.Faults{})
	told := claimWritten(t, frc, key, 580000)
	begun := make(chan struct{})
	go func() {
		out := func() (io.Writer, error) { close(begun); return io.Discard, nil }
		_, _ = pipe.Receive(context.Background(), nrc, io.Discard, pipe.ReceiveConfig{Key: key, Output: out})
	}()
	dial := func(_ context.Context, addr string) (conn.Conn, error) {
		if addr == "next" {
			return nsc, nil
		}
		return fsc, nil
	}
	var out0 testutil.Buffer
	relayErr := make(chan error, 1)
	go func() {
		rcfg := pipe.RelayConfig{To: "next", Dial: dial, Repair: true, Fallback: []pipe.Hop{{Addr: "fed"}}}
		_, err := pipe.Receive(context.Background(), rc, &out0, pipe.ReceiveConfig{Key: key, Relay: rcfg})
		relayErr <- err
	}()
	pr, pw := io.Pipe()
	go func() {
		// The next receiver goes before the relay posted a byte.
		<-begun
		nrc.Close()
		if abort := <-told; !strings.Contains(string(abort), "but only 0 were sent") {
			t.Errorf("the fallback was told %q, want that only 0 bytes were sent", abort)
		}
		pw.Write(in)
		pw.Close()
	}()
	st, err := pipe.Send(context.Background(), sc, pr, pipe.SendConfig{Key: key})
	checkErr(t, "sender", err, 0, "")
	checkErr(t, "relay", <-relayErr, 0, "")
	if st.Receivers != 1 || !slices.Equal(st.Lost, []string{"next", "fed"}) {
		t.Errorf("the sender counted %d receivers and lost %q, want 1 and next, fed", st.Receivers, st.Lost)
	}
	if !bytes.Equal(out0.Bytes(), in) {
		t.Errorf("the relay wrote %d bytes, want %d identical ones", out0.Len(), len(in))
	}
}

// TestTakeOverCountsTheHostsAhead takes a stream over, after its first
// receiver was cut off, with a scripted receiver at the first fallback
// that holds the key, claims the sender's stream at place 2, and confirms
// the whole stream for a number of receivers: the fallback and the one
// after it must be counted (or named lost), so a count of one fails the
// stream, where two completes it with the first receiver named lost.
func TestTakeOverCountsTheHostsAhead(t *testing.T) {
	t.Parallel()
	in := randomBytes(64<<10, 48)
	tests := []struct {
		name      string
		receivers uint32
		kind      conn.Kind
		says      string
	}{
		{"both counted", 2, 0, ""},
		{"one short", 1, conn.KindIntegrity, "counts 1 receivers and 0 lost, of the 2 from it to the end of the chain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := []byte("k")
			p := conn.NewParams(4096, 4)
			msc, rc := memPair(t, p, p, memconn.Faults{})
			sc := &authSpy{Conn: msc, auths: make(chan []byte, 1)}
			go func() { _, _ = pipe.Receive(context.Background(), rc, io.Discard, pipe.ReceiveConfig{Key: key}) }()
			fsc, frc := memPair(t, p, p, memconn.Faults{})
			claimed := make(chan []byte, 1)
			go scriptedReceiver(t, frc, key, true, tt.receivers, "", claimed)
			cfg := pipe.SendConfig{Key: key, Fallback: []pipe.Hop{{Addr: "liar"}, {Addr: "after"}},
				Dial: func(_ context.Context, addr string) (conn.Conn, error) {
					if addr == "liar" {
						return fsc, nil
					}
					return nil, errors.New("no such host")
				}}
			cr := &cutReader{r: bytes.NewReader(in), at: 16 << 10, cut: func() { sc.Close() }}
			st, err := pipe.Send(context.Background(), sc, cr, cfg)
			checkErr(t, "sender", err, tt.kind, tt.says)
			if err == nil && (st.Receivers != 2 || len(st.Lost) != 1) {
				t.Errorf("the sender counts %d receivers and lost %q, want 2 and the first", st.Receivers, st.Lost)
			}
			first, msg := <-sc.auths, <-claimed
			if len(msg) < wire.AuthBody || !bytes.Equal(msg[wire.AuthID:wire.AuthPlace], first[wire.AuthID:wire.AuthPlace]) || binary.LittleEndian.Uint32(msg[wire.AuthPlace:]) != 2 {
				t.Errorf("the taker-over's auth %q does not claim the stream's identity at place 2", msg)
			}
		})
	}
}

// scriptedReceiver plays a receiver that holds key against the sender on
// c: it takes the sender's auth (handed over on auths) and chain, welcomes
// it (a rejoin saying it wrote nothing), takes the stream, returning
// each credit, then names lost (newline-separated) as lost
// hosts and confirms the stream for receivers receivers, under the key.
func scriptedReceiver(t *testing.T, c *memconn.Conn, key []byte, rejoin bool, receivers uint32, lost string, auths chan<- []byte) {
	defer close(auths)
	p := &peer{t: t, c: c, cs: make([]conn.Completion, 16)}
	msg, tr := welcomeSender(p, key, rejoin)
	if msg == nil {
		return
	}
	auths <- msg
	var end []byte
	for end = p.next(); end != nil && typeOf(end) != 'E'; end = p.next() {
		if typeOf(end) == 'D' {
			p.control([]byte{1})
		}
	}
	if len(end) < wire.EndBody+pipeauth.MACLen {
		return
	}
	if lost != "" {
		p.control(append([]byte{wire.MsgLost, 0}, lost...))
	}
	total := binary.LittleEndian.Uint64(end)
	done := binary.LittleEndian.AppendUint64([]byte{'F'}, total)
	done = binary.LittleEndian.AppendUint32(done, receivers)
	tag := end[wire.EndBody : wire.EndBody+pipeauth.MACLen]
	p.control(append(done, seal.NewKeyed(pipeauth.StreamKey(key, tr), false).Done(int64(total), receivers, tag, []byte(lost))...))
}

// welcomeSender plays the handshake of a receiver that holds key against
// the sender on p: it takes the sender's auth and chain and welcomes it (a
// rejoin saying it wrote nothing). It returns the auth and the transcript,
// or nil if the sender failed first.
func welcomeSender(p *peer, key []byte, rejoin bool) (msg, tr []byte) {
	hello := append([]byte{'H', wire.FlagKey}, make([]byte, 32)...)
	p.control(hello)
	msg = p.nextFromSender('K')
	if len(msg) < wire.AuthBody {
		return nil, nil
	}
	p.control([]byte{wire.CtrlReturn}) // as the engine does for each control message
	var chain []string
	for more := msg[0]&wire.FlagChain != 0; more; {
		body := p.nextFromSender('C')
		if len(body) < 1+conn.TrailerLen {
			return nil, nil
		}
		p.control([]byte{wire.CtrlReturn})
		chain = append(chain, strings.Split(string(body[1:len(body)-conn.TrailerLen]), "\n")...)
		more = body[0] != 0
	}
	tr = pipeauth.Transcript(p.c.Info(), hello, msg[0], msg[wire.AuthNonce:wire.AuthID], msg[wire.AuthID:wire.AuthPlace], binary.LittleEndian.Uint32(msg[wire.AuthPlace:]), chain)
	desc, _ := p.c.OpenWindow()
	var written []byte
	if rejoin {
		written = binary.LittleEndian.AppendUint64(nil, 0)
	}
	welcome := append(append([]byte{'W', wire.FlagKey}, written...), pipeauth.Proof(key, pipeauth.ReceiverProof, tr, written, desc)...)
	p.control(append(welcome, desc...))
	return msg, tr
}

// TestRelaySaysAnotherIsSlow: the first receiver of a keyed chain, a key
// holder, takes the start of the stream and aborts it saying that the
// receiver after it fell behind and leaves the chain, as a slow host's
// own abort says. The sender gives up the one that aborted, never the one
// it names: it takes the next receiver over at its own place (2), which
// completes the stream, and names the liar alone lost.
func TestRelaySaysAnotherIsSlow(t *testing.T) {
	t.Parallel()
	in := randomBytes(64<<10, 50)
	key := []byte("k")
	p := conn.NewParams(4096, 4)
	sc, rc := memPair(t, p, p, memconn.Faults{})
	go func() {
		liar := &peer{t: t, c: rc, cs: make([]conn.Completion, 16)}
		if msg, _ := welcomeSender(liar, key, false); msg == nil {
			return
		}
		for range 4 {
			liar.nextFromSender('D')
			liar.control([]byte{1})
		}
		says := "keep up: the output of next fell behind the stream by more than the lag buffer and the spill hold: next leaves the chain, which goes on without it"
		liar.control(wire.AbortMessage([]byte{wire.MsgAbort}, conn.KindAborted, says, 0))
	}()
	fsc, frc := memPair(t, p, p, memconn.Faults{})
	claimed := make(chan []byte, 1)
	go scriptedReceiver(t, frc, key, true, 1, "", claimed)
	cfg := pipe.SendConfig{Key: key, Fallback: []pipe.Hop{{Addr: "next"}},
		Dial: func(_ context.Context, addr string) (conn.Conn, error) {
			if addr == "next" {
				return fsc, nil
			}
			return nil, errors.New("no such host")
		}}
	st, err := pipe.Send(context.Background(), sc, bytes.NewReader(in), cfg)
	checkErr(t, "sender", err, 0, "")
	if st.Receivers != 1 || !slices.Equal(st.Lost, []string{"mem:receiver"}) {
		t.Errorf("the sender counts %d receivers and lost %q, want 1 and the liar alone", st.Receivers, st.Lost)
	}
	if msg := <-claimed; len(msg) < wire.AuthBody || binary.LittleEndian.Uint32(msg[wire.AuthPlace:]) != 2 {
		t.Errorf("the taker-over's auth %q does not claim place 2", msg)
	}
}

// TestConfirmationNamesTheChain sends to a scripted first receiver that
// holds the key, naming a chain after it: its confirmation must count, or
// name lost, every receiver of the chain, and may name only the chain's.
func TestConfirmationNamesTheChain(t *testing.T) {
	t.Parallel()
	in := randomBytes(64<<10, 49)
	tests := []struct {
		name      string
		receivers uint32
		lost      string
		kind      conn.Kind
		says      string
	}{
		{"all counted", 3, "", 0, ""},
		{"one lost", 2, "h3", 0, ""},
		{"one short", 2, "", conn.KindIntegrity, "counts 2 receivers and 0 lost, of the 3"},
		{"a host of no chain", 2, "h9", conn.KindIntegrity, `names "h9" as lost, which is not a receiver after it`},
		{"a host twice", 1, "h3\nh3", conn.KindIntegrity, `names "h3" as lost`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := []byte("k")
			p := conn.NewParams(4096, 4)
			sc, rc := memPair(t, p, p, memconn.Faults{})
			auths := make(chan []byte, 1)
			go scriptedReceiver(t, rc, key, false, tt.receivers, tt.lost, auths)
			st, err := pipe.Send(context.Background(), sc, bytes.NewReader(in), pipe.SendConfig{Key: key, Chain: []string{"h2", "h3"}})
			checkErr(t, "sender", err, tt.kind, tt.says)
			if err == nil && (st.Receivers != int(tt.receivers) || strings.Join(st.Lost, "\n") != tt.lost) {
				t.Errorf("the sender counts %d receivers and lost %q, want %d and %q", st.Receivers, st.Lost, tt.receivers, tt.lost)
			}
			if msg := <-auths; len(msg) < wire.AuthBody || binary.LittleEndian.Uint32(msg[wire.AuthPlace:]) != 1 {
				t.Errorf("the first sender's auth %q does not claim place 1", msg)
			}
		})
	}
}

// cutReader reads r, and calls cut once at bytes were read.
type cutReader struct {
	r    io.Reader
	at   int
	read int
	cut  func()
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.read >= c.at && c.cut != nil {
		c.cut()
		c.cut = nil
	}
	n, err := c.r.Read(p[:min(len(p), 4096)])
	c.read += n
	return n, err
}

// senderCfg is the sender's part of cfg: its key, encryption and
// timeouts.
func senderCfg(cfg pipe.ReceiveConfig) pipe.SendConfig {
	return pipe.SendConfig{Key: cfg.Key, Encrypt: cfg.Encrypt, Timeout: cfg.Timeout, HandshakeTimeout: cfg.HandshakeTimeout}
}
