package cp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
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
	statusWait = 5 * time.Minute // the remote side putting the copy in place after the stream
)

// Options are the local side's settings.
type Options struct {
	Recursive bool          // copy directories (as a tar archive)
	Filter    *filter.Rules // what the sending side leaves out (--exclude and the like); nil: nothing
	Preserve  bool          // keep modes exactly (setuid and friends too), and a single file's times
	Keep      meta.Flags    // what an archive keeps besides data, modes and times (hard links, xattrs, ...)
	Encrypt   bool          // encrypt the stream's payload (else it is only authenticated)
	Resume    bool          // go on from a partial copy of a file (see resume.go)
	SSH       []string      // the ssh command and its options
	RemoteCmd string        // the rdmacp command on the remote host
	DataHost  string        // where the stream goes; empty: the host ssh connects to
	Transport string        // "auto", "rdma" or "tcp"
	Timeout   time.Duration // a silent peer is given up after this long
	Verbose   bool          // a summary line on Stderr
	Progress  bool          // a progress line on Stderr (see tally)
	Redraw    bool          // Stderr is a terminal: the progress line is redrawn in place
	LimitRate int64         // the most bytes per second the sending side sends; 0: no limit
	DataPorts portRange     // the ports the receiving side may listen on; zero: any
	Stderr    io.Writer
	// Launcher, if set, starts the remote side instead of ssh: its words,
	// with %h replaced by the host (else the host after them), then the
	// remote command's. It must carry the remote side's stdin and stdout
	// as ssh does.
	Launcher []string
	Fanout   int    // how many remote sides start at once, with several hosts
	Stats    string // a file to write the result to as JSON, if set
	// Window is the chunk size and depth this side proposes for its
	// stream (the two sides use the smaller of their proposals); zero:
	// defaultParams.
	Window conn.Params
	// Incr is what an incremental copy asks for (see incr.go).
	Incr incremental
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
func takeOffers(ctx context.Context, r *remote, st status, in *os.File, p *plan, key []byte, host string) (status, int64, error) {
	skipped := int64(-1)
	for st.kind == "have" {
		var err error
		switch {
		case in != nil && skipped >= 0:
			err = conn.Errorf(conn.KindSetup, "resume", "a second offer from the remote side for one file")
		case in != nil:
			skipped, err = resumeUpload(r, in, st.offer, key)
		case p.rs != nil:
			err = p.rs.add(st.offer)
		default:
			err = conn.Errorf(conn.KindSetup, "resume", "an offer the remote side was not asked for")
		}
		if err != nil {
			return st, skipped, err
		}
		if st, err = r.next(ctx, offerWait); err != nil {
			return st, skipped, conn.Errorf(conn.KindSetup, "start the remote side on "+host, "%v", err)
		}
		if err := remoteFailed(host, st); err != nil {
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
func Copy(ctx context.Context, paths []string, t Target, o Options) error {
	p, in, err := openSources(paths, o.Recursive, false, o.Filter)
	if err != nil {
		return err
	}
	if in != nil {
		defer in.Close()
	}
	if err := o.Incr.treeOnly(p.mode); err != nil {
		return err
	}
	o.noteSingle(p.mode)
	key := newKey()
	host, listen, err := o.streamHost(ctx, t)
	if err != nil {
		return err
	}
	req := o.request(key)
	req.Dest, req.Contents, req.Listen, req.DataPorts = t.Path, p.contents(o.Preserve), listen, o.DataPorts.String()
	var srcs *background
	if o.Incr.compares(p.mode) {
		if srcs, err = o.listSourcesBeside(p); err != nil {
			return err
		}
		defer srcs.wait()
	}
	r, st, err := begin(ctx, t, o, remoteReceive, req)
	if err != nil {
		return err
	}
	defer r.close()
	if o.Incr.compares(p.mode) {
		if st, err = o.listUpload(ctx, r, &p, srcs, st, t.Host); err != nil {
			return err
		}
		if o.Incr.dryRun {
			return remoteDone(t.Host, st, 0, "sent")
		}
	}
	if o.Resume && p.mode == modeSparse {
		fmt.Fprintf(o.Stderr, "rdmacp: -C: %s has holes, and travels whole\n", p.describe())
	}
	if o.Resume && p.mode == modeTar {
		p.rs = newResumption(p, key)
	}
	st, skipped, err := takeOffers(ctx, r, st, in, &p, key, t.Host)
	if err != nil {
		return err
	}
	if st.kind != "port" {
		return conn.Errorf(conn.KindSetup, "start the remote side on "+t.Host, "expected its port, got %q", st.kind)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(st.n)))
	stats, err := streamShown(ctx, addr, p, in, o, o.sendConfig(key), r.waited)
	if err != nil {
		r.close()
		return streamFailed(err, r)
	}
	st, err = r.next(ctx, statusWait)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil {
		return conn.Errorf(conn.KindAborted, "after the stream", "%v", err)
	}
	if err := remoteDone(t.Host, st, stats.Bytes, "sent"); err != nil {
		return err
	}
	if p.rs != nil {
		skipped = p.rs.kept
	}
	if o.Verbose {
		fmt.Fprintf(o.Stderr, "rdmacp: %s\n", summary(stats, skipped))
	}
	return p.leftErr()
}

// streamFailed returns err, the failure of an upload's stream to r, with
// the remote side's last words, and of the remote side's kind when that
// is a setup failure (it could not write DST: exit code 3, not 4).
func streamFailed(err error, r *remote) error {
	words := r.lastWords()
	err = fmt.Errorf("%w (remote side: %s)", err, words)
	if r.failed.kind == "fail" && kindOfCode(int(r.failed.n)) == conn.KindSetup {
		return &conn.Error{Kind: conn.KindSetup, Err: err}
	}
	return err
}

// resumeUpload compares the remote side's offer with in, the source,
// tells the remote side where the stream starts and moves in there. It
// returns how many bytes the partial copy had that are not sent again.
func resumeUpload(r *remote, in *os.File, o offer, key []byte) (int64, error) {
	at, err := seekResume(in, o, key)
	if err != nil {
		return 0, err
	}
	// A failed write means ssh is gone; the next status says why.
	_ = writeJSONLine(r.stdin, fromLine{at})
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

// receiveConfig is the engine's configuration of a stream received under
// key.
func (o Options) receiveConfig(key []byte) pipe.ReceiveConfig {
	return pipe.ReceiveConfig{Key: key, Encrypt: o.Encrypt, Timeout: o.Timeout}
}

// newKey returns a fresh one-time key.
func newKey() []byte {
	key := make([]byte, keyLen)
	rand.Read(key)
	return key
}

// request is the part of a request that o sets, with key.
func (o Options) request(key []byte) Request {
	return Request{Version: protocolVersion, Key: hex.EncodeToString(key), Preserve: o.Preserve, Keep: o.Keep.String(), Encrypt: o.Encrypt,
		Resume: o.Resume, Transport: o.Transport, Timeout: o.Timeout, Verbose: o.Verbose,
		List: o.Incr.on, Checksum: o.Incr.on && o.Incr.rules.Checksum, DryRun: o.Incr.on && o.Incr.dryRun}
}

// begin starts the remote side on t (`rdmacp flag`), hands it req and
// returns it with its first status line, which is not a failure.
func begin(ctx context.Context, t Target, o Options, flag string, req Request) (*remote, status, error) {
	r, err := startRemote(o, t, flag, o.Stderr)
	if err != nil {
		return nil, status{}, err
	}
	// A failed write means ssh is gone; next says why.
	_ = writeRequest(r.stdin, req)
	wait := portWait
	if (req.Resume || req.List) && !req.download() {
		wait = offerWait // the remote side lists or hashes what it has first
	}
	st, err := r.next(ctx, wait)
	switch {
	case ctx.Err() != nil:
		err = context.Cause(ctx)
	case err != nil:
		err = conn.Errorf(conn.KindSetup, "start the remote side on "+t.Host+" over ssh", "%v", err)
	case st.kind == "fail" && strings.HasPrefix(st.msg, requestOp):
		// An rdmacp of another version there cannot read the request.
		err = conn.Errorf(conn.KindSetup, "remote side on "+t.Host, "%q (is the same rdmacp installed there? See --remote-cmd)", st.msg)
	default:
		err = remoteFailed(t.Host, st)
	}
	if err != nil {
		r.close()
		return nil, status{}, err
	}
	return r, st, nil
}

// remoteDone checks the remote side's last status line after a stream of
// n bytes, which this side has "sent" or "received": it must say "ok n".
func remoteDone(host string, st status, n int64, verb string) error {
	if err := remoteFailed(host, st); err != nil {
		return err
	}
	if st.kind != "ok" || st.n != n {
		return conn.Errorf(conn.KindIntegrity, "after the stream", "the remote side reports %s %d, %d bytes were %s", st.kind, st.n, n, verb)
	}
	return nil
}

// streamHost returns where an upload's stream to t goes, and the address
// the remote side is to listen on ("": the one the ssh connection arrived
// on): --data-host's, resolved; with a launcher, which may not be ssh,
// the host's own, resolved here; else the host ssh connects to.
func (o Options) streamHost(ctx context.Context, t Target) (host, listen string, err error) {
	switch {
	case o.DataHost != "":
		host, err = resolveIP(ctx, o.DataHost, "--data-host")
		return host, host, err
	case o.Launcher != nil:
		host, err = resolveIP(ctx, t.Host, "resolve "+t.Host)
		return host, host, err
	}
	return resolveHost(ctx, o.SSH, t), "", nil
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
func stream(ctx context.Context, addr string, p plan, in *os.File, o Options, cfg pipe.SendConfig, gone <-chan struct{}) (pipe.Stats, error) {
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
func streamOnce(ctx context.Context, d conn.Dialer, addr string, p plan, in *os.File, o Options, cfg pipe.SendConfig, wait time.Duration) (pipe.Stats, error) {
	dctx, cancel := context.WithTimeout(ctx, wait)
	c, err := d.Dial(dctx, addr, o.params())
	cancel()
	if err != nil {
		return pipe.Stats{}, &dialError{addr: addr, err: err}
	}
	var st pipe.Stats
	if p.mode == modeFile {
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
func sendTar(ctx context.Context, c conn.Conn, p plan, cfg pipe.SendConfig, o Options) (pipe.Stats, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	p.tally.restart()
	go func() {
		defer close(done)
		pw.CloseWithError(writeTar(pw, p.srcs, o.Stderr, p.rs, o.Keep, p.tally))
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

// remoteFailed returns the remote side's failure as an error of the kind
// its exit code stands for, or nil if st is not a failure.
func remoteFailed(host string, st status) error {
	if st.kind != "fail" {
		return nil
	}
	return &conn.Error{Kind: kindOfCode(int(st.n)), Op: "remote side on " + host, Err: errors.New(strconv.Quote(st.msg))}
}

// kindOfCode maps an exit code back to the kind of error it stands for.
func kindOfCode(code int) conn.Kind {
	kinds := map[int]conn.Kind{2: conn.KindUsage, 3: conn.KindSetup, 4: conn.KindAborted, 5: conn.KindIntegrity, 6: conn.KindAuth, 7: conn.KindNoRDMA}
	if k, ok := kinds[code]; ok {
		return k
	}
	return conn.KindInternal
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
