package cp

import (
	"context"
	"os"

	"github.com/rdmapipe/rdmapipe/internal/cp/plan"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
	"github.com/rdmapipe/rdmapipe/internal/cp/tree"
	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// newTally returns the progress line of a copy of files entries holding
// bytes in their files, on o.Stderr, or nil without o.Progress.
func (o Options) newTally(files, bytes int64) *tree.Tally {
	if !o.Progress {
		return nil
	}
	return tree.NewTally(o.Stderr, !o.Redraw, files, bytes)
}

// planTally returns the progress line of the copy that p plans, or nil
// without o.Progress: a tree is counted first (see tree.CountTree).
func (o Options) planTally(p plan.Plan) *tree.Tally {
	switch {
	case !o.Progress:
		return nil
	case p.Mode == proto.ModeFile:
		return o.newTally(1, p.Srcs[0].Info.Size())
	}
	return o.newTally(tree.CountTree(p.Sources(), o.Keep))
}

// fetchTally returns the progress line of a download into s, whose plan
// is c, or nil without o.Progress: a tree's totals are the remote side's
// "total" line, which r reads.
func (o Options) fetchTally(ctx context.Context, r *remote.Remote, s tree.Sink, c proto.Contents, host string) (*tree.Tally, error) {
	if !o.Progress {
		return nil, nil
	}
	ts, ok := s.(*tree.TarSink)
	if !ok {
		return o.newTally(1, c.Size), nil
	}
	st, err := r.Next(ctx, proto.OfferWait)
	switch {
	case err != nil:
		return nil, conn.Errorf(conn.KindSetup, "read the totals from "+host, "%v", err)
	case st.Kind == "fail":
		return nil, remote.Failure(host, st)
	case st.Kind != "total":
		return nil, conn.Errorf(conn.KindSetup, "read the totals from "+host, "expected them, got %q", st.Kind)
	}
	ts.Tally = o.newTally(st.Files, st.N)
	return ts.Tally, nil
}

// streamShown is stream with the progress line of p, if o asks for one.
func streamShown(ctx context.Context, addr string, p plan.Plan, in *os.File, o Options, cfg pipe.SendConfig, gone <-chan struct{}) (pipe.Stats, error) {
	p.Tally = o.planTally(p)
	if p.Tally != nil && p.Mode == proto.ModeFile {
		cfg.Progress = p.Tally.Set
	}
	st, err := stream(ctx, addr, p, in, o, cfg, gone)
	if p.Mode == proto.ModeFile {
		p.Tally.EndFile(err)
	} else {
		p.Tally.End(err)
	}
	return st, err
}

// fetchShown is fetchStream with the progress line of a download into s,
// whose plan is c, if o asks for one (see fetchTally).
func (o Options) fetchShown(ctx context.Context, r *remote.Remote, srv server.Server, s tree.Sink, c proto.Contents, host, dst string) (pipe.Stats, error) {
	tl, err := o.fetchTally(ctx, r, s, c, host)
	if err != nil {
		s.Abort(0)
		return pipe.Stats{}, err
	}
	_, tree := s.(*tree.TarSink)
	if tl != nil && !tree {
		srv.Config.Progress = tl.Set
	}
	st, err := fetchStream(ctx, r, srv, s, host, dst)
	if tree {
		tl.End(err)
	} else {
		tl.EndFile(err)
	}
	return st, err
}
