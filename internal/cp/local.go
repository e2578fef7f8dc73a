package cp

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/cp/plan"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
	"github.com/rdmapipe/rdmapipe/internal/cp/tree"
	"github.com/rdmapipe/rdmapipe/internal/ratelimit"
	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/internal/window"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
)

// Bounds of the local side's waits.
const (
	portWait   = 2 * time.Minute  // ssh login (which may ask for a password) and the remote start
	dialWait   = 15 * time.Second // connecting to the remote side's port, attempts included
	retryPause = 100 * time.Millisecond
)

// Options are the local side's settings.
type Options struct {
	Recursive bool            // copy directories (as a tar archive)
	Filter    *filter.Rules   // what the sending side leaves out (--exclude and the like); nil: nothing
	Preserve  bool            // keep modes exactly (setuid and friends too), and a single file's times
	Keep      meta.Flags      // what an archive keeps besides data, modes and times (hard links, xattrs, ...)
	Encrypt   bool            // encrypt the stream's payload (else it is only authenticated)
	Resume    bool            // go on from a partial copy of a file (see proto/resume.go)
	DataHost  string          // where the stream goes; empty: the host ssh connects to
	Transport string          // "auto", "rdma" or "tcp"
	Timeout   time.Duration   // a silent peer is given up after this long
	Verbose   bool            // a summary line on Stderr
	Progress  bool            // a progress line on Stderr (see tree.Tally)
	Redraw    bool            // Stderr is a terminal: the progress line is redrawn in place
	LimitRate int64           // the most bytes per second the sending side sends; 0: no limit
	DataPorts proto.PortRange // the ports the receiving side may listen on; zero: any
	Stderr    io.Writer
	Fanout    int    // how many remote sides start at once, with several hosts
	Stats     string // a file to write the result to as JSON, if set
	// Window is the chunk size and depth this side proposes for its
	// stream (the two sides use the smaller of their proposals); zero:
	// defaultParams.
	Window conn.Params
	// Incr is what an incremental copy asks for (see incr.go).
	Incr incremental
	// Command is how the remote side is started: over ssh, or with a
	// launcher.
	remote.Command
}

// params returns the chunk size and depth this side proposes.
func (o Options) params() conn.Params {
	if o.Window == (conn.Params{}) {
		return defaultParams(o.Transport, false)
	}
	return o.Window
}

// defaultParams returns the chunk size and depth a side proposes over
// transport unless told otherwise: the one window policy's (see
// window.Choose) for this process, a relay's if relay. The two sides use
// the smaller of their proposals.
func defaultParams(transport string, relay bool) conn.Params {
	t := transportOf(transport, nil)
	pins := window.Either(t.Pins(false), t.Pins(true))
	if relay {
		pins = window.Both(t.Pins(false), t.Pins(true))
	}
	return window.Choose(window.ThisHost(), window.Flags{}, pins).Params()
}

// takeOffers takes the remote side's resume offers, from st on, for the
// one file in or the tree of p, and returns the status after them and how
// many bytes of the one file the remote side has (-1: none offered).
func takeOffers(ctx context.Context, r *remote.Remote, st proto.Status, in *os.File, p *plan.Plan, key []byte, host string) (proto.Status, int64, error) {
	skipped := int64(-1)
	for st.Kind == "have" {
		var err error
		switch {
		case in != nil && skipped >= 0:
			err = conn.Errorf(conn.KindSetup, "resume", "a second offer from the remote side for one file")
		case in != nil:
			skipped, err = resumeUpload(r, in, st.Offer, key)
		case p.Resume != nil:
			err = p.Resume.Add(st.Offer)
		default:
			err = conn.Errorf(conn.KindSetup, "resume", "an offer the remote side was not asked for")
		}
		if err != nil {
			return st, skipped, err
		}
		if st, err = r.Next(ctx, proto.OfferWait); err != nil {
			return st, skipped, conn.Errorf(conn.KindSetup, "start the remote side on "+host, "%v", err)
		}
		if err := remote.Failure(host, st); err != nil {
			return st, skipped, err
		}
	}
	return st, skipped, nil
}

// Copy copies the files and directories at paths to t (an upload): it
// starts the remote side over ssh (see Serve), sends it the request with a
// one-time key, connects to the port it reports and streams the sources,
// then waits for the remote side's result. One regular file travels as
// is; anything else as a tar archive.
func Copy(ctx context.Context, paths []string, t remote.Target, o Options) error {
	p, in, err := plan.Open(paths, o.Recursive, false, o.Filter)
	if err != nil {
		return err
	}
	if in != nil {
		defer in.Close()
	}
	if err := o.Incr.treeOnly(p.Mode); err != nil {
		return err
	}
	o.noteSingle(p.Mode)
	key := proto.NewKey()
	host, listen, err := o.uploadHost(ctx, t)
	if err != nil {
		return err
	}
	req := o.request(key)
	req.Dest, req.Contents, req.Listen, req.DataPorts = t.Path, p.Contents(o.Preserve), listen, o.DataPorts.String()
	var srcs *background
	if o.Incr.compares(p.Mode) {
		if srcs, err = o.listSourcesBeside(p); err != nil {
			return err
		}
		defer srcs.wait()
	}
	r, st, err := begin(ctx, t, o, remoteReceive, req)
	if err != nil {
		return err
	}
	defer r.Close()
	if o.Incr.compares(p.Mode) {
		if st, err = o.listUpload(ctx, r, &p, srcs, st, t.Host); err != nil {
			return err
		}
		if o.Incr.dryRun {
			return remote.Done(t.Host, st, 0, "sent")
		}
	}
	if o.Resume && p.Mode == proto.ModeSparse {
		fmt.Fprintf(o.Stderr, "rdmacp: -C: %s has holes, and travels whole\n", p.Describe())
	}
	if o.Resume && p.Mode == proto.ModeTar {
		p.Resume = tree.NewResumption(p.Sources(), key)
	}
	st, skipped, err := takeOffers(ctx, r, st, in, &p, key, t.Host)
	if err != nil {
		return err
	}
	if st.Kind != "port" {
		return conn.Errorf(conn.KindSetup, "start the remote side on "+t.Host, "expected its port, got %q", st.Kind)
	}
	addr := net.JoinHostPort(host(), strconv.Itoa(int(st.N)))
	stats, err := streamShown(ctx, addr, p, in, o, o.sendConfig(key), r.Waited)
	if err != nil {
		r.Close()
		return streamFailed(err, r)
	}
	st, err = r.Next(ctx, remote.StatusWait)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil {
		return conn.Errorf(conn.KindAborted, "after the stream", "%v", err)
	}
	if err := remote.Done(t.Host, st, stats.Bytes, "sent"); err != nil {
		return err
	}
	if p.Resume != nil {
		skipped = p.Resume.Kept()
	}
	if o.Verbose {
		fmt.Fprintf(o.Stderr, "rdmacp: %s\n", summary(stats, skipped))
	}
	return p.LeftErr()
}

// streamFailed returns err, the failure of an upload's stream to r, with
// the remote side's last words, and of the remote side's kind when that
// is a setup failure (it could not write DST: exit code 3, not 4).
func streamFailed(err error, r *remote.Remote) error {
	words := r.LastWords()
	err = fmt.Errorf("%w (remote side: %s)", err, words)
	if r.Failed.Kind == "fail" && remote.KindOfCode(int(r.Failed.N)) == conn.KindSetup {
		return &conn.Error{Kind: conn.KindSetup, Err: err}
	}
	return err
}

// resumeUpload compares the remote side's offer with in, the source,
// tells the remote side where the stream starts and moves in there. It
// returns how many bytes the partial copy had that are not sent again.
func resumeUpload(r *remote.Remote, in *os.File, o proto.Offer, key []byte) (int64, error) {
	at, err := proto.SeekResume(in, o, key)
	if err != nil {
		return 0, err
	}
	// A failed write means ssh is gone; the next status says why.
	_ = proto.WriteJSONLine(r.Stdin, proto.FromLine{From: at})
	return at, nil
}

// The hidden flags that start the remote side of an upload and of a
// download.
const (
	remoteReceive = "--remote-receive"
	remoteSend    = "--remote-send"
)

// sendConfig is the engine's configuration of a stream sent under key.
func (o Options) sendConfig(key []byte) pipe.SendConfig {
	return pipe.SendConfig{Key: key, Encrypt: o.Encrypt, Timeout: o.Timeout}
}

// repairing sets cfg, a stream's to the first host of a chain, to give up
// a host that dies mid-stream and go on with the hosts after it that f,
// the forward line to that first host, names.
func (o Options) repairing(cfg *pipe.SendConfig, f proto.ForwardLine) {
	d := newDialer(o)
	cfg.Repair, cfg.Fallback = true, f.Hops()
	cfg.Dial = func(ctx context.Context, addr string) (conn.Conn, error) { return d.Dial(ctx, addr, o.params()) }
}

// receiveConfig is the engine's configuration of a stream received under
// key.
func (o Options) receiveConfig(key []byte) pipe.ReceiveConfig {
	return pipe.ReceiveConfig{Key: key, Encrypt: o.Encrypt, Timeout: o.Timeout}
}

// request is the part of a request that o sets, with key.
func (o Options) request(key []byte) proto.Request {
	return proto.Request{Version: proto.Version, Key: hex.EncodeToString(key), Preserve: o.Preserve, Keep: o.Keep.String(), Encrypt: o.Encrypt,
		Resume: o.Resume, Transport: o.Transport, Timeout: o.Timeout, Verbose: o.Verbose,
		List: o.Incr.on, Checksum: o.Incr.on && o.Incr.rules.Checksum, DryRun: o.Incr.on && o.Incr.dryRun}
}

// begin starts the remote side on t (`rdmacp flag`), hands it req and
// returns it with its first status line, which is not a failure.
func begin(ctx context.Context, t remote.Target, o Options, flag string, req proto.Request) (*remote.Remote, proto.Status, error) {
	r, err := remote.Start(o.Command, t, flag, o.Stderr)
	if err != nil {
		return nil, proto.Status{}, err
	}
	// A failed write means ssh is gone; next says why.
	_ = proto.WriteRequest(r.Stdin, req)
	wait := portWait
	if (req.Resume || req.List) && !req.Download() {
		wait = proto.OfferWait // the remote side lists or hashes what it has first
	}
	st, err := r.Next(ctx, wait)
	switch {
	case ctx.Err() != nil:
		err = context.Cause(ctx)
	case err != nil:
		err = conn.Errorf(conn.KindSetup, "start the remote side on "+t.Host+" over ssh", "%v", err)
	case st.Kind == "fail" && strings.HasPrefix(st.Msg, proto.RequestOp):
		// An rdmacp of another version there cannot read the request.
		err = conn.Errorf(conn.KindSetup, "remote side on "+t.Host, "%q (is the same rdmacp installed there? See --remote-cmd)", st.Msg)
	default:
		err = remote.Failure(t.Host, st)
	}
	if err != nil {
		r.Close()
		return nil, proto.Status{}, err
	}
	return r, st, nil
}

// streamHost returns where an upload's stream to t goes, and the address
// the remote side is to listen on ("": the one the ssh connection arrived
// on): --data-host's, resolved; with a launcher, which may not be ssh,
// the host's own, resolved here; else the host ssh connects to.
func (o Options) streamHost(ctx context.Context, t remote.Target) (host, listen string, err error) {
	switch {
	case o.DataHost != "":
		host, err = resolveIP(ctx, o.DataHost, "--data-host")
		return host, host, err
	case o.Launcher != nil:
		host, err = resolveIP(ctx, t.Host, "resolve "+t.Host)
		return host, host, err
	}
	return o.HostName(ctx, t), "", nil
}

// uploadHost is streamHost for an upload, whose request does not need
// the host: unless an address is named, ssh -G asks for it beside the
// login, and host waits for its answer.
func (o Options) uploadHost(ctx context.Context, t remote.Target) (host func() string, listen string, err error) {
	if o.DataHost != "" || o.Launcher != nil {
		h, listen, err := o.streamHost(ctx, t)
		return func() string { return h }, listen, err
	}
	c := make(chan string, 1)
	go func() { c <- o.HostName(ctx, t) }()
	return sync.OnceValue(func() string { return <-c }), "", nil
}

// resolveIP resolves name to the IP address the stream goes to; op names
// the step in its error.
func resolveIP(ctx context.Context, name, op string) (string, error) {
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return "", conn.Errorf(conn.KindSetup, op, "%v", err)
	}
	return ips[0].Unmap().String(), nil
}

// stream connects to the remote side at addr and sends it the sources:
// the open file in (as is, so that pipe can see a regular file) or a tar
// archive of p's sources. An attempt that fails before the stream starts
// (refused, reset, or dropped in its handshake, as a flood of other
// connections or a race may do) is tried again, until dialWait has passed
// since the first or gone is closed (the remote side ended). Retrying is
// safe: pipe.Send reads nothing before the handshake has finished.
func stream(ctx context.Context, addr string, p plan.Plan, in *os.File, o Options, cfg pipe.SendConfig, gone <-chan struct{}) (pipe.Stats, error) {
	if o.Transport == "rdma" {
		if err := rdma.Available(); err != nil {
			return pipe.Stats{}, err
		}
	}
	d := newDialer(o)
	deadline := time.Now().Add(dialWait)
	for {
		st, err := streamOnce(ctx, d, addr, p, in, o, cfg, time.Until(deadline))
		if err == nil || !pipe.Retryable(st, err) || ctx.Err() != nil || time.Now().After(deadline) {
			return st, err
		}
		if o.Verbose {
			fmt.Fprintf(o.Stderr, "rdmacp: connecting again: %v\n", err)
		}
		select {
		case <-time.After(retryPause):
		case <-ctx.Done():
			return st, err
		case <-gone:
			return st, err
		}
	}
}

// streamOnce is one attempt of stream, connecting with d within wait.
func streamOnce(ctx context.Context, d conn.Dialer, addr string, p plan.Plan, in *os.File, o Options, cfg pipe.SendConfig, wait time.Duration) (pipe.Stats, error) {
	dctx, cancel := context.WithTimeout(ctx, wait)
	c, err := d.Dial(dctx, addr, o.params())
	cancel()
	if err != nil {
		return pipe.Stats{}, &dialError{addr: addr, err: err}
	}
	var st pipe.Stats
	if p.Mode == proto.ModeFile {
		st, err = pipe.Send(ctx, c, o.limit(ctx, in), cfg)
	} else {
		st, err = sendTar(ctx, c, p, cfg, o)
	}
	pipe.Release(c, err)
	return st, err
}

// dialError is a failure to connect to the remote side at addr, which
// the stream goes to.
type dialError struct {
	addr string
	err  error
}

func (e *dialError) Error() string {
	return fmt.Sprintf("%v (the stream goes straight to %s, not through ssh: see --data-host)", e.err, e.addr)
}

func (e *dialError) Unwrap() error { return e.err }

// sendTar streams p's sources to c as a tar archive, paced to o's rate.
func sendTar(ctx context.Context, c conn.Conn, p plan.Plan, cfg pipe.SendConfig, o Options) (pipe.Stats, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	p.Tally.Restart()
	go func() {
		defer close(done)
		pw.CloseWithError(tree.WriteTar(pw, p.Sources(), o.Stderr, p.Resume, o.Keep, p.Tally))
	}()
	st, err := pipe.Send(ctx, c, o.limit(ctx, pr), cfg)
	pr.CloseWithError(errors.New("the stream ended"))
	<-done
	return st, err
}

// limit returns r paced to o.LimitRate, or r itself without a limit (an
// *os.File stays one, for the engine to see).
func (o Options) limit(ctx context.Context, r io.Reader) io.Reader {
	if o.LimitRate <= 0 {
		return r
	}
	return &ratelimit.Reader{Ctx: ctx, R: r, B: ratelimit.NewBucket(o.LimitRate, ratelimit.System{})}
}

// newDialer returns the dialer for o.Transport; auto mode says once on
// o.Stderr, with -v, when it falls back to TCP.
func newDialer(o Options) conn.Dialer {
	return transportOf(o.Transport, notices(o.Verbose, o.Stderr)).Dialer()
}

// summary is the -v line for a finished copy, which a partial copy
// spared skipped bytes of (-1: the copy did not resume).
func summary(st pipe.Stats, skipped int64) string {
	secs := st.Elapsed.Seconds()
	line := fmt.Sprintf("%d bytes in %.3f s (%.1f MiB/s) over %s, chunk %d x depth %d, %s", st.Bytes, secs, units.MiBps(st.Bytes, secs), st.Info.Transport, st.Info.Chunk, st.Info.Depth, protection(st.Integrity))
	if skipped >= 0 {
		line += fmt.Sprintf("; resumed: %d bytes of a partial copy kept, not sent again", skipped)
	}
	return line
}

// protection says how a stream with integrity check name was protected.
func protection(name string) string {
	if name == "aes-256-gcm" {
		return "encrypted (AES-256-GCM)"
	}
	return "not encrypted (authenticated with " + name + ")"
}

// noteSingle notes, once, that a copy whose contents are of mode, one
// file that travels as is, keeps none of the xattrs, ACLs or owners that
// o asks for.
func (o Options) noteSingle(mode string) {
	k := o.Keep
	if mode != proto.ModeTar && (k.Xattrs || k.ACLs || k.Owner || k.Group) {
		fmt.Fprintf(o.Stderr, "rdmacp: one file travels as is, without its xattrs, ACLs, owner or group: copy its directory with -r to keep them\n")
	}
}
