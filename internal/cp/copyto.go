package cp

import (
	"context"
	"io"
	"net"
	"path"
	"strconv"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/cp/chain"
	"github.com/rdmapipe/rdmapipe/internal/cp/plan"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

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
func CopyTo(ctx context.Context, paths []string, hosts []remote.Target, o Options) error {
	p, in, err := plan.Open(paths, o.Recursive, false, o.Filter)
	if err != nil {
		return err
	}
	if in != nil {
		defer in.Close()
	}
	o.noteSingle(p.Mode)
	err = chain.Down(ctx, hosts, o.chainOf(p.Contents(o.Preserve)), func(ctx context.Context, live []*chain.Member) (pipe.Stats, error) {
		first := live[0]
		cfg := o.sendConfig(first.Key)
		o.repairing(&cfg, chain.Forward(live))
		return stream(ctx, first.Addr, p, in, o, cfg, chain.AnyEnded(live))
	})
	if err != nil {
		return err
	}
	return p.LeftErr()
}

// chainOf is how a copy of c to several hosts starts each host's remote
// side and reports their results.
func (o Options) chainOf(c proto.Contents) chain.Config {
	return chain.Config{Fanout: o.Fanout, Stderr: o.Stderr, Verbose: o.Verbose, Stats: o.Stats,
		Start: func(ctx context.Context, m *chain.Member, stderr io.Writer) error {
			return o.startMember(ctx, m, c, stderr)
		},
		Summary: func(st pipe.Stats) string { return summary(st, -1) },
		CatchUp: func(ctx context.Context, m, from *chain.Member) error {
			return o.catchUp(ctx, c, m, from)
		}}
}

// catchUp copies to m, a host that a copy of c to several hosts gave up
// in mid-stream, what it lacks, straight from from, which has the copy in
// place: a copy between the two (see Between) that resumes from m's
// partial copy and claims the version of the source that the partial
// copy is of (from's copy is exact, and the resume checks each block it
// keeps). The copy is DST/NAME on from where DST is a directory there;
// else DST itself, copied into DST's parent on m.
func (o Options) catchUp(ctx context.Context, c proto.Contents, m, from *chain.Member) error {
	o.Resume, o.Filter = true, nil
	names := c.Names
	if c.Mode != proto.ModeTar {
		names = []string{c.Name}
	}
	srcs := make([]remote.Target, len(names))
	for i, n := range names {
		srcs[i] = from.Target
		srcs[i].Path = path.Join(from.Target.Path, n)
	}
	dst, key := m.Target, proto.NewKey()
	sender, plan, got, err := o.catchUpSide(ctx, key, srcs)
	if err != nil && len(names) == 1 {
		dst.Path = path.Dir(strings.TrimRight(m.Target.Path, "/"))
		sender, plan, got, err = o.catchUpSide(ctx, key, []remote.Target{from.Target})
	}
	if err != nil {
		return err
	}
	defer sender.Close()
	if got.Mode != proto.ModeTar && got.Size == c.Size {
		got.Changed = c.Changed
	}
	return o.betweenTo(ctx, sender, plan, got, key, from.Target.SSHDest(), dst)
}

// catchUpSide starts the sending side of a catch-up (see catchUp) for
// srcs, all on one host, and returns it, its plan and the contents the
// receiving side is told.
func (o Options) catchUpSide(ctx context.Context, key []byte, srcs []remote.Target) (*remote.Remote, proto.Contents, proto.Contents, error) {
	req, a := o.fetchRequest(key, srcs)
	req.ConnectLater = true
	return sendingSide(ctx, srcs[0], o, req, a)
}

// startMember starts m's remote side to receive c, with its stderr on
// stderr, and waits for its port.
func (o Options) startMember(ctx context.Context, m *chain.Member, c proto.Contents, stderr io.Writer) error {
	o.Stderr = stderr
	host, listen, err := o.streamHost(ctx, m.Target)
	if err == nil && listen == "" {
		host, err = resolveIP(ctx, host, "resolve "+host) // the hosts relay to it by address
	}
	if err != nil {
		return err
	}
	req := o.request(m.Key)
	req.Dest, req.Contents, req.Listen, req.Relay, req.DataPorts = m.Target.Path, c, listen, true, o.DataPorts.String()
	r, st, err := begin(ctx, m.Target, o, remoteReceive, req)
	if err != nil {
		return err
	}
	if st.Kind != "port" {
		r.Close()
		return conn.Errorf(conn.KindSetup, "start the remote side on "+m.Target.Host, "expected its port, got %q", st.Kind)
	}
	m.Remote, m.Addr = r, net.JoinHostPort(host, strconv.Itoa(int(st.N)))
	return nil
}
