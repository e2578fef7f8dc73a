package cp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/plan"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
	"github.com/rdmapipe/rdmapipe/internal/cp/tree"
	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Fetch copies the files and directories at srcs, all on one host, to
// dst here (a download): it listens on the local address that leads to
// the remote host, starts the remote side over ssh (see ServeSend) and
// sends it the request with a one-time key and that address; the remote
// side says what the stream carries, this side prepares dst for it, and
// the remote side connects and streams. The copy is put in place once it
// has arrived whole and the remote side has confirmed it.
func Fetch(ctx context.Context, srcs []remote.Target, dst string, o Options) error {
	t := srcs[0]
	l, addr, err := o.fetchListener(ctx, t)
	if err != nil {
		return err
	}
	defer l.Close()
	key := proto.NewKey()
	req, a := o.fetchRequest(key, srcs)
	req.Connect = addr
	r, st, err := begin(ctx, t, o, remoteSend, req)
	if err != nil {
		return err
	}
	defer r.Close()
	if st.Kind != "plan" {
		return conn.Errorf(conn.KindSetup, "start the remote side on "+t.Host, "expected its plan, got %q", st.Kind)
	}
	s, err := prepare(a, st.Contents, dst, o)
	if err != nil {
		return claimOf(t.Host, err)
	}
	o.noteSingle(st.Contents.Mode)
	if ts, ok := s.(*tree.TarSink); ok && o.Incr.on {
		if err := o.fetchListing(ctx, r, ts, t.Host); err != nil || o.Incr.dryRun {
			s.Abort(0)
			return claimOf(t.Host, err)
		}
	} else if err := o.Incr.treeOnly(st.Contents.Mode); err != nil {
		s.Abort(0)
		return err
	}
	skipped := int64(-1)
	if o.Resume {
		if skipped, err = offerDownload(ctx, r, s, key, t.Host, o.Stderr); err != nil {
			s.Abort(0)
			return err
		}
	}
	stats, err := o.fetchShown(ctx, r, server.Server{Listener: l, Config: o.receiveConfig(key), Log: o.Stderr}, s, st.Contents, t.Host, dst)
	if err != nil {
		return claimOf(t.Host, err)
	}
	if ts, ok := s.(*tree.TarSink); ok && ts.Kept() >= 0 {
		skipped = ts.Kept()
	}
	if o.Verbose {
		fmt.Fprintf(o.Stderr, "rdmacp: %s\n", summary(stats, skipped))
	}
	return leftOn(t.Host, a.Srcs, st.Contents)
}

// fetchRequest returns a download's request of srcs under key, but for
// where to connect, and what it asks for.
func (o Options) fetchRequest(key []byte, srcs []remote.Target) (proto.Request, plan.Asked) {
	req := o.request(key)
	req.Recursive, req.LimitRate, req.Filter, req.Progress = o.Recursive, o.LimitRate, o.Filter.Lines(), o.Progress
	a := plan.Asked{Recursive: o.Recursive}
	for _, s := range srcs {
		req.Send = append(req.Send, s.Path)
		a.Srcs = append(a.Srcs, s.Path)
	}
	return req, a
}

// leftOn returns the failure of a download from host whose plan c left
// out some of what srcs asked for (the remote side's messages say why),
// or nil.
func leftOn(host string, srcs []string, c proto.Contents) error {
	if c.Left == 0 {
		return nil
	}
	var why []error
	for k, n := range c.Counts {
		if n == 0 {
			why = append(why, fmt.Errorf("%s:%s", host, srcs[k]))
		}
	}
	return &plan.LeftOut{Why: append(why, fmt.Errorf("%d paths on %s in all, as its messages say", c.Left, host))}
}

// fetchListener listens, for a download from t, on the local address that
// leads to t's host (or --data-host), and returns the listener and the
// address the remote side is to connect to.
func (o Options) fetchListener(ctx context.Context, t remote.Target) (conn.Listener, string, error) {
	host := o.DataHost
	if host == "" {
		host = o.HostName(ctx, t)
	}
	local, err := localAddr(ctx, host)
	if err != nil {
		return nil, "", err
	}
	l, port, err := listenAnyPort(ctx, o.Transport, local, o.DataPorts, o.params(), notices(o.Verbose, o.Stderr))
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintf(notices(o.Verbose, o.Stderr), "rdmacp: listening on %s (this host's address toward %s)\n", l.Addr(), host)
	return l, net.JoinHostPort(local, strconv.Itoa(port)), nil
}

// prepare checks the remote side's plan c against what a asked for (see
// plan.Asked.Check) and prepares dst for it; a source whose name only the
// remote side knows becomes dst itself.
func prepare(a plan.Asked, c proto.Contents, dst string, o Options) (tree.Sink, error) {
	newName := len(a.Srcs) == 1 && isNewName(dst, o.Resume)
	names, err := a.Check(c, newName)
	if err != nil {
		return nil, err
	}
	c.Names, c.Files = names, c.Mode == proto.ModeTar && !a.Recursive
	req := proto.Request{Dest: dst, Contents: c, Preserve: o.Preserve, Keep: o.Keep.String(), Resume: o.Resume}
	if c.Mode != proto.ModeTar || plan.AskedName(a.Srcs[0]) != "" {
		return tree.NewSink(req)
	}
	d := tree.ExpandHome(dst)
	if err := tree.CheckDir(filepath.Dir(d)); err != nil {
		return nil, err
	}
	return tree.OpenTarSink(req, filepath.Dir(d), filepath.Base(d))
}

// isNewName says whether dst is a new name for a single source: nothing
// is there, or, resuming, a directory that an interrupted copy to that
// new name made (written as a plain name at its end, without a trailing
// slash, see tree.NewSink).
func isNewName(dst string, resume bool) bool {
	d := tree.ExpandHome(dst)
	fi, err := os.Stat(d)
	plain := !strings.HasSuffix(dst, "/") && path.Base(dst) == filepath.Base(d) && proto.CheckName(filepath.Base(d)) == nil
	return errors.Is(err, fs.ErrNotExist) || resume && plain && err == nil && fi.IsDir()
}

// claimOf returns err, a download's failure, as the command's error for
// what the remote side on host sent unasked, if it is one.
func claimOf(host string, err error) error {
	if u := (*proto.Unasked)(nil); errors.As(err, &u) {
		return &command.Unasked{Host: host, Claim: u.Claim, Why: u.Why}
	}
	return err
}

// fetchStream receives the remote side's stream into s with srv,
// and puts it in place (at dst) once the remote side, whose status lines
// r reads, has confirmed that it sent what arrived. The remote side's
// failure ends the wait for its stream.
func fetchStream(ctx context.Context, r *remote.Remote, srv server.Server, s tree.Sink, host, dst string) (pipe.Stats, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	last := make(chan proto.Status, 1)
	go func() {
		st, err := r.Next(rctx, proto.MaxTimeout)
		if err == nil && st.Kind != "ok" {
			err = remote.Failure(host, st)
		}
		if err != nil {
			cancel(err)
		}
		last <- st
	}()
	confirm := func(stats pipe.Stats) error {
		select {
		case st := <-last:
			return remote.Done(host, st, stats.Bytes, "received")
		case <-time.After(remote.StatusWait):
			return conn.Errorf(conn.KindAborted, "after the stream", "no word from the remote side within %v", remote.StatusWait)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	stats, err := receive(rctx, srv, s, confirm, dst)
	if u := (*proto.Unasked)(nil); err != nil && !errors.As(err, &u) && rctx.Err() != nil && ctx.Err() == nil {
		return stats, context.Cause(rctx)
	}
	return stats, err
}

// offerDownload is a download's resume on the local side: it offers the
// remote side what s, the destination, holds, and returns how many bytes
// of a single file are kept (-1 for a tree, whose count comes with its
// extraction).
func offerDownload(ctx context.Context, r *remote.Remote, s tree.Sink, key []byte, host string, stderr io.Writer) (int64, error) {
	switch s := s.(type) {
	case *tree.FileSink:
		return resumeDownload(ctx, r, s, key, host, stderr)
	case *tree.TarSink:
		list, err := s.Offers(key)
		if err != nil {
			return 0, conn.Errorf(conn.KindSetup, "resume", "%v", err)
		}
		// A failed write means ssh is gone; the remote side's status says why.
		for _, o := range list {
			_ = proto.WriteJSONLine(r.Stdin, o)
		}
		_ = proto.WriteJSONLine(r.Stdin, proto.Offer{End: true})
		return -1, nil
	}
	fmt.Fprintf(stderr, "rdmacp: -C: the file from %s has holes, and travels whole\n", host)
	return -1, nil
}

// resumeDownload offers the remote side what the partial file of s
// holds, and starts s where the remote side says the stream starts. It
// returns that place: how many bytes of the partial copy are kept.
func resumeDownload(ctx context.Context, r *remote.Remote, s *tree.FileSink, key []byte, host string, stderr io.Writer) (int64, error) {
	o, err := s.Offer(key)
	if err != nil {
		return 0, conn.Errorf(conn.KindSetup, "resume", "%v", err)
	}
	if s.Stale() {
		fmt.Fprintf(stderr, "rdmacp: %s changed on %s since the partial copy (size or modification time): starting over\n", s.Name(), host)
	}
	// A failed write means ssh is gone; next says why.
	_ = proto.WriteJSONLine(r.Stdin, o)
	st, err := r.Next(ctx, proto.OfferWait)
	switch {
	case err != nil:
		return 0, conn.Errorf(conn.KindSetup, "resume", "%v", err)
	case st.Kind == "fail":
		return 0, remote.Failure(host, st)
	case st.Kind != "from":
		return 0, conn.Errorf(conn.KindSetup, "resume", "expected where the stream starts, got %q", st.Kind)
	}
	if err := s.Start(st.N, o); err != nil {
		return 0, conn.Errorf(conn.KindIntegrity, "resume", "%v", err)
	}
	return st.N, nil
}

// localAddr returns the address of this host that the kernel would send
// from to host (resolved if it is a name): where a download's remote side
// connects to.
func localAddr(ctx context.Context, host string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return "", conn.Errorf(conn.KindSetup, "find the local address toward "+host, "%v", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
