// Package chain runs a copy to several hosts as one stream that each
// host relays to the next: it starts their remote sides a fan-out at a
// time, tells each where to pass the stream on, and collects and reports
// every host's result, naming a pair that cannot connect and the hosts
// the stream gave up.
package chain

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// DefaultFanout is how many remote sides a copy to several hosts starts
// at once, as pdsh's default fan-out.
const DefaultFanout = 32

// Config is how a copy to several hosts starts each host's remote
// side, and where and how it reports their results.
type Config struct {
	Fanout  int       // how many remote sides start at once
	Stderr  io.Writer // each host's failure, and its remote side's stderr, each line marked with its name
	Verbose bool      // each host's result, and the stream's summary
	Stats   string    // a file to write the result to as JSON, if set
	// Start starts the remote side of m, its stderr on stderr, to
	// receive the stream, and sets m's remote side and address once it
	// listens.
	Start func(ctx context.Context, m *Member, stderr io.Writer) error
	// Summary is the -v line of the stream sent.
	Summary func(pipe.Stats) string
	// CatchUp, if set, copies to m, which the stream gave up, what it
	// lacks from from, a host with the copy in place (see catchUpAll).
	CatchUp func(ctx context.Context, m, from *Member) error
}

// Member is one host of a copy to several hosts.
type Member struct {
	Target remote.Target  // the host, and DST there
	Key    []byte         // its one-time key
	Addr   string         // IP:PORT its remote side listens on, once started
	Remote *remote.Remote // its remote side, once started
	err    error          // why the copy failed there, if it did
	bytes  int64          // what it wrote, as it says
	given  bool           // the stream gave it up in mid-stream
	log    *lineMarker    // its stderr
}

// Down starts the remote sides of hosts (see Config.Start), each with
// its own one-time key, sends the stream down those that started with send
// (which is given them in chain order, and returns what was sent, and
// which hosts it gave up) and reports every host's result (see
// finishAll).
func Down(ctx context.Context, hosts []remote.Target, cfg Config, send func(context.Context, []*Member) (pipe.Stats, error)) error {
	ms := make([]*Member, len(hosts))
	var mu sync.Mutex
	for i, t := range hosts {
		ms[i] = &Member{Target: t, Key: proto.NewKey(), log: &lineMarker{mu: &mu, w: cfg.Stderr, name: t.SSHDest()}}
	}
	startAll(ctx, ms, cfg)
	defer func() {
		closeAll(ms)
		for _, m := range ms {
			m.log.flush()
		}
	}()
	var live []*Member
	for _, m := range ms {
		if m.err == nil {
			live = append(live, m)
		}
	}
	var stats pipe.Stats
	if len(live) > 0 {
		stats = relayAll(ctx, live, send)
		catchUpAll(ctx, live, stats, cfg)
	}
	return finishAll(ms, stats, cfg)
}

// startAll starts the remote side of every member, cfg.fanout at a
// time, and waits for each one's port (or failure).
func startAll(ctx context.Context, ms []*Member, cfg Config) {
	slots := make(chan struct{}, max(cfg.Fanout, 1))
	var wg sync.WaitGroup
	for _, m := range ms {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			m.err = cfg.Start(ctx, m, m.log)
		})
	}
	wg.Wait()
}

// relayAll tells each of live where to pass the stream on, and the
// hosts after that one to go on with if it dies, sends the stream down
// them with send (to the first, or the next ones should it die) and
// collects every one's result. When send fails and a host says it could
// not connect to the next one, that pair is every host's failure.
func relayAll(ctx context.Context, live []*Member, send func(context.Context, []*Member) (pipe.Stats, error)) pipe.Stats {
	for i, m := range live {
		// A failed write means ssh is gone; its status says why.
		_ = proto.WriteJSONLine(m.Remote.Stdin, Forward(live[i+1:]))
	}
	first := live[0]
	stats, err := send(ctx, live)
	if err != nil {
		// Every host's stream ends with this one's: stop them all, and
		// take what each said.
		closeAll(live)
		first.err = fmt.Errorf("%w (remote side: %s)", err, first.Remote.LastWords())
		for _, m := range live[1:] {
			m.err = conn.Errorf(conn.KindAborted, "remote side on "+m.Target.Host, "%s", m.Remote.LastWords())
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
				m.Remote.Close()
				var words string
				if m.bytes, words = m.Remote.Result(); m.bytes != stats.Bytes {
					m.err = conn.Errorf(conn.KindAborted, "remote side on "+m.Target.Host, "given up in mid-stream (it died, was silent past --timeout, or fell behind), the copy went on without it: %s", words)
					m.given = true
				}
				return
			}
			st, err := m.Remote.Next(ctx, remote.StatusWait)
			switch {
			case ctx.Err() != nil:
				m.err = context.Cause(ctx)
			case err != nil:
				m.err = conn.Errorf(conn.KindAborted, "after the stream, remote side on "+m.Target.Host, "%v", err)
			default:
				m.err, m.bytes = remote.Done(m.Target.Host, st, stats.Bytes, "sent"), st.N
			}
		})
	}
	wg.Wait()
	return stats
}

// catchUpAll copies to each host of live that the stream gave up what
// it lacks, with cfg.CatchUp, from a host that has the copy in place
// (each in turn until one succeeds, the first tried spread over them),
// all at once. A host that none can help keeps its failure, with why.
func catchUpAll(ctx context.Context, live []*Member, stats pipe.Stats, cfg Config) {
	if cfg.CatchUp == nil {
		return
	}
	var done []*Member
	for _, m := range live {
		if m.err == nil {
			done = append(done, m)
		}
	}
	var wg sync.WaitGroup
	for i, m := range live {
		if !m.given {
			continue
		}
		wg.Go(func() {
			var whys []string
			for k := range done {
				from := done[(i+k)%len(done)]
				err := cfg.CatchUp(ctx, m, from)
				if err == nil {
					m.err, m.bytes = nil, stats.Bytes
					fmt.Fprintf(notices(cfg), "rdmacp: %s: caught up from %s\n", m.Target.SSHDest(), from.Target.SSHDest())
					return
				}
				whys = append(whys, fmt.Sprintf("from %s: %v", from.Target.SSHDest(), err))
			}
			if len(whys) == 0 {
				whys = []string{"no host has the copy in place"}
			}
			m.err = fmt.Errorf("%w; not caught up: %s", m.err, strings.Join(whys, "; "))
		})
	}
	wg.Wait()
}

// notices is where -v's notices go: cfg.Stderr, or nowhere.
func notices(cfg Config) io.Writer {
	if cfg.Verbose {
		return cfg.Stderr
	}
	return io.Discard
}

// AnyEnded returns a channel closed once the remote side of any of ms
// has ended: before the stream starts, the chain can then not be set up.
func AnyEnded(ms []*Member) <-chan struct{} {
	return endedSaying(ms, func(int) bool { return true })
}

// Broken returns a channel closed once a host of live (the chain,
// in its order) has ended saying it could not connect to the next one: a
// host says so only as the stream is set up, so the stream cannot start.
func Broken(live []*Member) <-chan struct{} {
	return endedSaying(live[:len(live)-1], func(i int) bool {
		_, ok := remote.CouldNotConnect(live[i].Remote.Failed, live[i+1].Addr)
		return ok
	})
}

// endedSaying returns a channel closed once the remote side of ms[i] has
// ended and says(i), asked then, holds, for any i.
func endedSaying(ms []*Member, says func(i int) bool) <-chan struct{} {
	ended := make(chan struct{})
	var once sync.Once
	for i, m := range ms {
		go func() {
			<-m.Remote.Waited
			if says(i) {
				once.Do(func() { close(ended) })
			}
		}()
	}
	return ended
}

// brokenPair returns, once the remote sides of live (the chain, in its
// order) have ended, the failure of the last of them that says it could
// not connect to the next one (see remote.LinkFailed), or nil. Only the last
// counts: the hosts before it could not set their stream up because it
// could not, and one may have found it gone when it tried again.
func brokenPair(live []*Member) error {
	for i := len(live) - 2; i >= 0; i-- {
		m, next := live[i], live[i+1]
		if _, ok := remote.CouldNotConnect(m.Remote.Failed, next.Addr); ok {
			return remote.LinkFailed(m.Target.Host, next.Target.Host, next.Addr, m.Remote.Failed)
		}
	}
	return nil
}

// Forward is the forward line of the host before rest: the first of
// rest, and up to proto.MaxFallbacks after it.
func Forward(rest []*Member) proto.ForwardLine {
	if len(rest) == 0 {
		return proto.ForwardLine{}
	}
	f := proto.ForwardLine{To: rest[0].Addr, Key: hex.EncodeToString(rest[0].Key)}
	for _, m := range rest[1:min(len(rest), 1+proto.MaxFallbacks)] {
		f.Then = append(f.Then, proto.ForwardLine{To: m.Addr, Key: hex.EncodeToString(m.Key)})
	}
	return f
}

// lostMembers returns the members of live that the stream gave up, as
// named in lost: by the address the host before it connected to (the
// first, the one this side connected to, by its connection's remote
// address, the same IP and port). A name that is none of theirs is a
// protocol error: no host is guessed for it.
func lostMembers(live []*Member, lost []string) (map[*Member]bool, error) {
	gone := map[*Member]bool{}
	for _, name := range lost {
		i := slices.IndexFunc(live, func(m *Member) bool { return sameAddr(m.Addr, name) })
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
func closeAll(ms []*Member) {
	var wg sync.WaitGroup
	for _, m := range ms {
		if m.Remote != nil {
			wg.Go(m.Remote.Close)
		}
	}
	wg.Wait()
}

// finishAll reports each member's result (failures on stderr, every one
// with -v and in cfg.stats) and returns the copy's error.
func finishAll(ms []*Member, stats pipe.Stats, cfg Config) error {
	var failed []string
	var first error
	for _, m := range ms {
		switch {
		case m.err != nil:
			failed = append(failed, m.Target.SSHDest())
			fmt.Fprintf(cfg.Stderr, "rdmacp: %s: %v\n", m.Target.SSHDest(), m.err)
			if first == nil {
				first = m.err
			}
		case cfg.Verbose:
			fmt.Fprintf(cfg.Stderr, "rdmacp: %s: in place, %d bytes written\n", m.Target.SSHDest(), m.bytes)
		}
	}
	var err error
	switch {
	case len(failed) == len(ms):
		err = first
	case len(failed) > 0:
		err = &command.Partial{Failed: failed, Hosts: len(ms)}
	}
	if cfg.Verbose && len(failed) < len(ms) {
		sent := cfg.Summary(stats)
		if stats.Info.Transport == "" {
			sent = fmt.Sprintf("%d bytes sent by the sending host", stats.Bytes) // whose -v sums the stream up
		}
		fmt.Fprintf(cfg.Stderr, "rdmacp: %s; in place on %d of %d hosts\n", sent, len(ms)-len(failed), len(ms))
	}
	if cfg.Stats != "" {
		if werr := writeReport(cfg.Stats, newReport(ms, stats, err)); werr != nil && err == nil {
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
func newReport(ms []*Member, stats pipe.Stats, err error) copyReport {
	rep := copyReport{OK: err == nil, ExitCode: command.ExitCode(err), Bytes: stats.Bytes, Seconds: stats.Elapsed.Seconds(),
		Transport: stats.Info.Transport, Integrity: stats.Integrity}
	if err != nil {
		rep.Error = err.Error()
	}
	rep.MiBps = units.MiBps(stats.Bytes, rep.Seconds)
	for _, m := range ms {
		h := hostReport{Host: m.Target.SSHDest(), OK: m.err == nil, ExitCode: command.ExitCode(m.err), Bytes: m.bytes}
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
