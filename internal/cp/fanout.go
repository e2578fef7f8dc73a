package cp

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// DefaultFanout is how many remote sides a copy to several hosts starts
// at once, as pdsh's default fan-out.
const DefaultFanout = 32

// member is one host of a copy to several hosts.
type member struct {
	t     Target
	key   []byte      // its one-time key
	addr  string      // IP:PORT its remote side listens on, once started
	r     *remote     // its remote side, once started
	err   error       // why the copy failed there, if it did
	bytes int64       // what it wrote, as it says
	log   *lineMarker // its stderr
}

// CopyTo copies the files and directories at paths to each host of hosts
// (the same DST on each, in t.Path) as one stream that every host relays
// to the next, in the order given, so that each byte leaves this host
// once. It starts the remote sides (o.Fanout at a time), each with its
// own one-time key; once every one has reported its port, it tells each
// where to pass the stream on and the key of the host there (the next one
// that started; the last passes it nowhere), so that a host relays only
// along this chain. Then it streams to the first and waits for every
// host's result. A host whose remote side did not start is left out of
// the chain; one that cannot connect to the next one fails the copy
// before the stream, naming the pair. It returns nil when every host has
// the copy in place, a *command.Partial when some have, else the first
// host's failure; -v and o.Stats report each host's result.
func CopyTo(ctx context.Context, paths []string, hosts []Target, o Options) error {
	p, in, err := openSources(paths, o.Recursive, false, o.Filter)
	if err != nil {
		return err
	}
	if in != nil {
		defer in.Close()
	}
	o.noteSingle(p.mode)
	err = copyDown(ctx, hosts, p.contents(o.Preserve), o, func(ctx context.Context, live []*member) (pipe.Stats, error) {
		first := live[0]
		cfg := o.sendConfig(first.key)
		o.repairing(&cfg, forwardTo(live))
		return stream(ctx, first.addr, p, in, o, cfg, anyEnded(live))
	})
	if err != nil {
		return err
	}
	return p.leftErr()
}

// copyDown starts the remote sides of hosts to receive c, each with its
// own one-time key, sends the stream down those that started with send
// (which is given them in chain order, and returns what was sent, and
// which hosts it gave up) and reports every host's result (see
// finishAll).
func copyDown(ctx context.Context, hosts []Target, c Contents, o Options, send func(context.Context, []*member) (pipe.Stats, error)) error {
	ms := make([]*member, len(hosts))
	var mu sync.Mutex
	for i, t := range hosts {
		ms[i] = &member{t: t, key: newKey(), log: &lineMarker{mu: &mu, w: o.Stderr, name: t.SSHDest()}}
	}
	startAll(ctx, ms, c, o)
	defer func() {
		closeAll(ms)
		for _, m := range ms {
			m.log.flush()
		}
	}()
	var live []*member
	for _, m := range ms {
		if m.err == nil {
			live = append(live, m)
		}
	}
	var stats pipe.Stats
	if len(live) > 0 {
		stats = relayAll(ctx, live, send)
	}
	return finishAll(ms, stats, o)
}

// startAll starts the remote side of every member, o.Fanout at a time,
// and waits for each one's port (or failure).
func startAll(ctx context.Context, ms []*member, c Contents, o Options) {
	slots := make(chan struct{}, max(o.Fanout, 1))
	var wg sync.WaitGroup
	for _, m := range ms {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			m.start(ctx, c, o)
		})
	}
	wg.Wait()
}

// start starts m's remote side to receive c, with its stderr's lines
// marked with its name, and waits for its port.
func (m *member) start(ctx context.Context, c Contents, o Options) {
	o.Stderr = m.log
	host, listen, err := o.streamHost(ctx, m.t)
	if err == nil && listen == "" {
		host, err = resolveIP(ctx, host, "resolve "+host) // the hosts relay to it by address
	}
	if err != nil {
		m.err = err
		return
	}
	req := o.request(m.key)
	req.Dest, req.Contents, req.Listen, req.Relay, req.DataPorts = m.t.Path, c, listen, true, o.DataPorts.String()
	r, st, err := begin(ctx, m.t, o, remoteReceive, req)
	if err != nil {
		m.err = err
		return
	}
	if st.kind != "port" {
		r.close()
		m.err = conn.Errorf(conn.KindSetup, "start the remote side on "+m.t.Host, "expected its port, got %q", st.kind)
		return
	}
	m.r, m.addr = r, net.JoinHostPort(host, strconv.Itoa(int(st.n)))
}

// relayAll tells each of live where to pass the stream on, and the
// hosts after that one to go on with if it dies, sends the stream down
// them with send (to the first, or the next ones should it die) and
// collects every one's result. When send fails and a host says it could
// not connect to the next one, that pair is every host's failure.
func relayAll(ctx context.Context, live []*member, send func(context.Context, []*member) (pipe.Stats, error)) pipe.Stats {
	for i, m := range live {
		// A failed write means ssh is gone; its status says why.
		_ = writeJSONLine(m.r.stdin, forwardTo(live[i+1:]))
	}
	first := live[0]
	stats, err := send(ctx, live)
	if err != nil {
		// Every host's stream ends with this one's: stop them all, and
		// take what each said.
		closeAll(live)
		first.err = fmt.Errorf("%w (remote side: %s)", err, first.r.lastWords())
		for _, m := range live[1:] {
			m.err = conn.Errorf(conn.KindAborted, "remote side on "+m.t.Host, "%s", m.r.lastWords())
		}
		if err := brokenPair(live); err != nil {
			for _, m := range live {
				m.err = err
			}
		}
		return stats
	}
	lost, err := lostMembers(live, stats.Lost)
	if err != nil {
		// The engine vouched for names this side never gave: nothing the
		// stream said of the hosts can be taken as it is.
		closeAll(live)
		for _, m := range live {
			m.err = err
		}
		return stats
	}
	var wg sync.WaitGroup
	for _, m := range live {
		wg.Go(func() {
			if lost[m] {
				m.r.close()
				var words string
				if m.bytes, words = m.r.result(); m.bytes != stats.Bytes {
					m.err = conn.Errorf(conn.KindAborted, "remote side on "+m.t.Host, "given up in mid-stream (it died, or was silent past --timeout), the copy went on without it: %s", words)
				}
				return
			}
			st, err := m.r.next(ctx, statusWait)
			switch {
			case ctx.Err() != nil:
				m.err = context.Cause(ctx)
			case err != nil:
				m.err = conn.Errorf(conn.KindAborted, "after the stream, remote side on "+m.t.Host, "%v", err)
			default:
				m.err, m.bytes = remoteDone(m.t.Host, st, stats.Bytes, "sent"), st.n
			}
		})
	}
	wg.Wait()
	return stats
}

// anyEnded returns a channel closed once the remote side of any of ms
// has ended: before the stream starts, the chain can then not be set up.
func anyEnded(ms []*member) <-chan struct{} {
	return endedSaying(ms, func(int) bool { return true })
}

// chainBroken returns a channel closed once a host of live (the chain,
// in its order) has ended saying it could not connect to the next one: a
// host says so only as the stream is set up, so the stream cannot start.
func chainBroken(live []*member) <-chan struct{} {
	return endedSaying(live[:len(live)-1], func(i int) bool {
		_, ok := couldNotConnect(live[i].r.failed, live[i+1].addr)
		return ok
	})
}

// endedSaying returns a channel closed once the remote side of ms[i] has
// ended and says(i), asked then, holds, for any i.
func endedSaying(ms []*member, says func(i int) bool) <-chan struct{} {
	ended := make(chan struct{})
	var once sync.Once
	for i, m := range ms {
		go func() {
			<-m.r.waited
			if says(i) {
				once.Do(func() { close(ended) })
			}
		}()
	}
	return ended
}

// brokenPair returns, once the remote sides of live (the chain, in its
// order) have ended, the failure of the last of them that says it could
// not connect to the next one (see linkFailed), or nil. Only the last
// counts: the hosts before it could not set their stream up because it
// could not, and one may have found it gone when it tried again.
func brokenPair(live []*member) error {
	for i := len(live) - 2; i >= 0; i-- {
		m, next := live[i], live[i+1]
		if _, ok := couldNotConnect(m.r.failed, next.addr); ok {
			return linkFailed(m.t.Host, next.t.Host, next.addr, m.r.failed)
		}
	}
	return nil
}

// repairing sets cfg, a stream's to the first host of a chain, to give up
// a host that dies mid-stream and go on with the hosts after it that f,
// the forward line to that first host, names.
func (o Options) repairing(cfg *pipe.SendConfig, f forwardLine) {
	d := newDialer(o)
	cfg.Repair, cfg.Fallback = true, f.hops()
	cfg.Dial = func(ctx context.Context, addr string) (conn.Conn, error) { return d.Dial(ctx, addr, o.params()) }
}

// forwardTo is the forward line of the host before rest: the first of
// rest, and up to maxFallbacks after it.
func forwardTo(rest []*member) forwardLine {
	if len(rest) == 0 {
		return forwardLine{}
	}
	f := forwardLine{To: rest[0].addr, Key: hex.EncodeToString(rest[0].key)}
	for _, m := range rest[1:min(len(rest), 1+maxFallbacks)] {
		f.Then = append(f.Then, forwardLine{To: m.addr, Key: hex.EncodeToString(m.key)})
	}
	return f
}

// lostMembers returns the members of live that the stream gave up, as
// named in lost: by the address the host before it connected to (the
// first, the one this side connected to, by its connection's remote
// address, the same IP and port). A name that is none of theirs is a
// protocol error: no host is guessed for it.
func lostMembers(live []*member, lost []string) (map[*member]bool, error) {
	gone := map[*member]bool{}
	for _, name := range lost {
		i := slices.IndexFunc(live, func(m *member) bool { return sameAddr(m.addr, name) })
		if i < 0 {
			return nil, conn.Errorf(conn.KindIntegrity, "the stream's lost hosts", "it names %q, which is none of the hosts of this copy", name)
		}
		gone[live[i]] = true
	}
	return gone, nil
}

// sameAddr says whether a and b are the same address: equal, or the same
// IP (IPv4 as itself or mapped into IPv6, with any zone) and port.
func sameAddr(a, b string) bool {
	if a == b {
		return true
	}
	x, errX := netip.ParseAddrPort(a)
	y, errY := netip.ParseAddrPort(b)
	return errX == nil && errY == nil && x.Port() == y.Port() &&
		x.Addr().Unmap().WithZone("") == y.Addr().Unmap().WithZone("")
}

// closeAll ends the ssh sessions of ms, all at once.
func closeAll(ms []*member) {
	var wg sync.WaitGroup
	for _, m := range ms {
		if m.r != nil {
			wg.Go(m.r.close)
		}
	}
	wg.Wait()
}

// finishAll reports each member's result (failures on stderr, every one
// with -v and in o.Stats) and returns the copy's error.
func finishAll(ms []*member, stats pipe.Stats, o Options) error {
	var failed []string
	var first error
	for _, m := range ms {
		switch {
		case m.err != nil:
			failed = append(failed, m.t.SSHDest())
			fmt.Fprintf(o.Stderr, "rdmacp: %s: %v\n", m.t.SSHDest(), m.err)
			if first == nil {
				first = m.err
			}
		case o.Verbose:
			fmt.Fprintf(o.Stderr, "rdmacp: %s: in place, %d bytes written\n", m.t.SSHDest(), m.bytes)
		}
	}
	var err error
	switch {
	case len(failed) == len(ms):
		err = first
	case len(failed) > 0:
		err = &command.Partial{Failed: failed, Hosts: len(ms)}
	}
	if o.Verbose && len(failed) < len(ms) {
		sent := summary(stats, -1)
		if stats.Info.Transport == "" {
			sent = fmt.Sprintf("%d bytes sent by the sending host", stats.Bytes) // whose -v sums the stream up
		}
		fmt.Fprintf(o.Stderr, "rdmacp: %s; in place on %d of %d hosts\n", sent, len(ms)-len(failed), len(ms))
	}
	if o.Stats != "" {
		if werr := writeReport(o.Stats, newReport(ms, stats, err)); werr != nil && err == nil {
			return werr
		}
	}
	return err
}

// copyReport is a copy's result as --stats-json writes it.
type copyReport struct {
	OK        bool         `json:"ok"`
	ExitCode  int          `json:"exit_code"`
	Error     string       `json:"error,omitempty"`
	Bytes     int64        `json:"bytes"`
	Seconds   float64      `json:"seconds"`
	MiBps     float64      `json:"mib_per_s"`
	Transport string       `json:"transport,omitempty"`
	Integrity string       `json:"integrity,omitempty"`
	Hosts     []hostReport `json:"hosts"`
}

// hostReport is one host's result.
type hostReport struct {
	Host     string `json:"host"`
	OK       bool   `json:"ok"`
	ExitCode int    `json:"exit_code"`
	Bytes    int64  `json:"bytes"`
	Error    string `json:"error,omitempty"`
}

// newReport is the report of a copy to ms that streamed stats and ended
// with err.
func newReport(ms []*member, stats pipe.Stats, err error) copyReport {
	rep := copyReport{OK: err == nil, ExitCode: command.ExitCode(err), Bytes: stats.Bytes, Seconds: stats.Elapsed.Seconds(),
		Transport: stats.Info.Transport, Integrity: stats.Integrity}
	if err != nil {
		rep.Error = err.Error()
	}
	rep.MiBps = units.MiBps(stats.Bytes, rep.Seconds)
	for _, m := range ms {
		h := hostReport{Host: m.t.SSHDest(), OK: m.err == nil, ExitCode: command.ExitCode(m.err), Bytes: m.bytes}
		if m.err != nil {
			h.Error = m.err.Error()
		}
		rep.Hosts = append(rep.Hosts, h)
	}
	return rep
}

// writeReport writes rep to path as JSON.
func writeReport(path string, rep copyReport) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return conn.Errorf(conn.KindAborted, "write the report", "%v", err)
	}
	return nil
}

// lineMarker writes whole lines to w, each after its host's name, so that
// what several remote sides say on their stderr at once stays apart.
type lineMarker struct {
	mu   *sync.Mutex // shared by the markers of one w
	w    io.Writer
	name string
	part []byte // the end of the last write, not yet a line
}

func (l *lineMarker) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		if _, err := fmt.Fprintf(l.w, "%s: %s", l.name, l.part[:i+1]); err != nil {
			return 0, err
		}
		l.part = l.part[i+1:]
	}
}

// flush writes what is left of a last line without its newline.
func (l *lineMarker) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.part) > 0 {
		fmt.Fprintf(l.w, "%s: %s\n", l.name, l.part)
		l.part = nil
	}
}
