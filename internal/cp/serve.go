package cp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Bounds of the remote side's waits.
const (
	requestWait = 30 * time.Second // for the request line, once started
	senderWait  = 60 * time.Second // for the sender to connect and prove the key
	// connectWait is, in a copy between two remote hosts, for the connect
	// line: the local side starts the receiving host (an ssh login, which
	// may ask for a password) after the plan.
	connectWait = portWait + requestWait
)

// Serve runs the remote side of an upload (rdmacp --remote-receive), which
// the local side starts over ssh: it reads the request line from stdin,
// prepares the destination, listens on a port of the system's choice on
// the address the ssh connection arrived on (see listenHost), reports the
// port on stdout, receives one stream from the sender that proves the
// request's one-time key, puts it in place and reports the result on
// stdout (see status.go). It stops when stdin (the ssh channel) ends, and
// returns the exit code.
func Serve(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	return report(stdout, func() (int64, error) { return serveReceive(ctx, stdin, stdout, stderr) })
}

// ServeSend runs the remote side of a download (rdmacp --remote-send): it
// reads the request line from stdin, checks the sources, reports on
// stdout what the stream will carry, connects to the local side's
// listener that the request names and streams the sources there, and
// reports the result on stdout. It stops when stdin ends, and returns the
// exit code.
func ServeSend(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	return report(stdout, func() (int64, error) { return serveSend(ctx, stdin, stdout, stderr) })
}

// report runs serve and reports its result on stdout: "ok BYTES" or the
// failure, exit 9 for an archive entry the sending side sent unasked (see
// refusedClaim). It returns the exit code.
func report(stdout io.Writer, serve func() (int64, error)) int {
	n, err := serve()
	code := command.ExitCode(err)
	if u := (*unasked)(nil); errors.As(err, &u) {
		code = command.ExitUnasked
	}
	if err != nil {
		writeFail(stdout, code, command.Message(err))
		return code
	}
	writeOK(stdout, n)
	return code
}

func serveReceive(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (int64, error) {
	req, br, err := session(stdin, false)
	if err != nil {
		return 0, err
	}
	s, err := newSink(req)
	if err != nil {
		return 0, err
	}
	if fs, ok := s.(*fileSink); ok && req.Resume {
		if err := offerPartial(fs, req.keyBytes(), br, stdout, stderr); err != nil {
			s.Abort(0)
			return 0, err
		}
	}
	if ts, ok := s.(*tarSink); ok && req.Resume {
		if err := offerTree(ts, req.keyBytes(), stdout); err != nil {
			s.Abort(0)
			return 0, err
		}
	}
	if ts, ok := s.(*tarSink); ok && req.List {
		if err := listDest(ts, req, br, stdout, stderr); err != nil || req.DryRun {
			s.Abort(0)
			return 0, err
		}
	}
	host, why := listenHost(req, os.Getenv("SSH_CONNECTION"))
	ports, _ := parsePorts(req.DataPorts) // validated; zero if none
	l, port, err := listenAnyPort(ctx, req.Transport, host, ports, defaultParams(req.Transport, req.Relay), notices(req.Verbose, stderr))
	if err != nil {
		s.Abort(0)
		return 0, err
	}
	defer l.Close()
	fmt.Fprintf(notices(req.Verbose, stderr), "rdmacp: listening on %s (%s)\n", l.Addr(), why)
	if err := writePort(stdout, port); err != nil {
		s.Abort(0)
		return 0, conn.Errorf(conn.KindAborted, "report the port", "%v", err)
	}
	cfg := pipe.ReceiveConfig{Key: req.keyBytes(), Encrypt: req.Encrypt, Timeout: req.Timeout}
	chain, unreached := context.WithCancelCause(ctx)
	defer unreached(nil)
	if req.Relay {
		if err := forwardWith(&cfg.Relay, req, br, stderr, unreached); err != nil {
			s.Abort(0)
			return 0, err
		}
	}
	rctx, cancel := untilEOF(chain, br)
	defer cancel(nil)
	st, err := receive(rctx, server.Server{Listener: l, Config: cfg, Log: stderr, Rejoin: req.Relay}, s, nil, req.Dest)
	if err != nil && chain.Err() != nil && ctx.Err() == nil {
		return st.Bytes, context.Cause(chain) // the next host was not reached: the chain is broken
	}
	return st.Bytes, err
}

// forwardWait bounds the wait for the forward line of a copy to several
// hosts, which comes once every host has started: with many hosts, ssh
// logins a fan-out at a time, each bounded by portWait.
const forwardWait = time.Hour

// forwardWith reads the forward line of a copy to several hosts from br
// and sets cfg to pass the stream on where it says, to the host holding
// the key it names, and, should that host die, to the hosts after it
// that it names (see pipe.RelayConfig.Repair); and nowhere else, whatever
// the sender asks. A failure to connect to the next host as the stream
// is set up (not because the sender went away meanwhile) is given to
// unreached: the chain cannot be set up.
func forwardWith(cfg *pipe.RelayConfig, req Request, br *bufio.Reader, stderr io.Writer, unreached context.CancelCauseFunc) error {
	f, err := readForward(br)
	if err != nil || f.To == "" {
		return err
	}
	d := newDialer(Options{Transport: req.Transport, Stderr: notices(req.Verbose, stderr)})
	cfg.To, cfg.Key, cfg.Repair, cfg.Fallback = f.To, decodeKey(f.Key), true, f.hops()
	cfg.Dial = func(ctx context.Context, addr string) (conn.Conn, error) {
		c, err := d.Dial(ctx, addr, defaultParams(req.Transport, req.Relay))
		if err != nil && addr == f.To && !errors.Is(ctx.Err(), context.Canceled) {
			unreached(cannotConnect(addr, err))
		}
		return c, err
	}
	return nil
}

// readForward reads and checks the forward line of a copy to several
// hosts from br.
func readForward(br *bufio.Reader) (forwardLine, error) {
	var f forwardLine
	if err := lineWithin(br, forwardWait, &f); err != nil {
		return f, conn.Errorf(conn.KindSetup, "read where to pass the stream on", "%v", err)
	}
	if err := f.validate(); err != nil {
		return f, conn.Errorf(conn.KindSetup, "read where to pass the stream on", "%v", err)
	}
	return f, nil
}

// offerPartial is an upload's resume on the remote side: it offers what
// the partial file of s holds ("have" on stdout) and starts s where the
// local side answers on br that the stream starts.
func offerPartial(s *fileSink, key []byte, br *bufio.Reader, stdout, stderr io.Writer) error {
	o, err := s.offer(key)
	if err != nil {
		return conn.Errorf(conn.KindSetup, "resume", "%v", err)
	}
	if s.stale {
		fmt.Fprintf(stderr, "rdmacp: %s changed since the partial copy (size or modification time): starting over\n", s.final)
	}
	if err := writeHave(stdout, o); err != nil {
		return conn.Errorf(conn.KindAborted, "resume", "%v", err)
	}
	var from fromLine
	if err := lineWithin(br, offerWait, &from); err != nil {
		return conn.Errorf(conn.KindSetup, "resume", "%v", err)
	}
	if err := s.start(from.From, o); err != nil {
		return conn.Errorf(conn.KindSetup, "resume", "%v", err)
	}
	return nil
}

// offerTree is a tree upload's resume on the remote side: it offers what
// the destination holds of the archive's files ("have" lines on stdout).
func offerTree(s *tarSink, key []byte, stdout io.Writer) error {
	list, err := s.offers(key)
	if err != nil {
		return conn.Errorf(conn.KindSetup, "resume", "%v", err)
	}
	for _, o := range list {
		if err := writeHave(stdout, o); err != nil {
			return conn.Errorf(conn.KindAborted, "resume", "%v", err)
		}
	}
	return nil
}

func serveSend(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (int64, error) {
	req, br, err := session(stdin, true)
	if err != nil {
		return 0, err
	}
	p, in, c, err := planSend(req, stderr)
	if err != nil {
		return 0, err
	}
	if in != nil {
		defer in.Close()
	}
	if err := writePlan(stdout, c); err != nil {
		return 0, conn.Errorf(conn.KindAborted, "report the plan", "%v", err)
	}
	if p.mode == modeTar && req.List {
		if err := listSources(&p, req, br, stdout); err != nil {
			return 0, err
		}
	}
	if req.DryRun {
		return 0, nil
	}
	skipped := int64(-1)
	if in != nil && req.Resume {
		if skipped, err = resumeSource(in, req.keyBytes(), br, stdout); err != nil {
			return 0, err
		}
	}
	if p.mode == modeTar && req.Resume {
		p.rs = newResumption(p, req.keyBytes())
		if err := readOffers(br, p.rs); err != nil {
			return 0, err
		}
	}
	keep, _ := meta.Parse(req.Keep) // validated
	if req.Progress && p.mode == modeTar {
		files, bytes := countTree(p.srcs, keep)
		if err := writeTotal(stdout, files, bytes); err != nil {
			return 0, conn.Errorf(conn.KindAborted, "report the totals", "%v", err)
		}
	}
	o := Options{Keep: keep, Encrypt: req.Encrypt, Transport: req.Transport, Timeout: req.Timeout, Verbose: req.Verbose, Stderr: stderr, LimitRate: req.LimitRate}
	addr, cfg, err := sendTo(req, br, o)
	if err != nil {
		return 0, err
	}
	ctx, cancel := untilEOF(ctx, br)
	defer cancel(nil)
	st, err := stream(ctx, addr, p, in, o, cfg, nil)
	if req.ConnectLater {
		if p.rs != nil {
			skipped = p.rs.kept
		}
		err = betweenResult(ctx, st, err, addr, o, skipped)
	}
	if req.Chain && err == nil {
		for _, lost := range st.Lost {
			if err := writeLost(stdout, lost); err != nil {
				return st.Bytes, conn.Errorf(conn.KindAborted, "report the lost hosts", "%v", err)
			}
		}
	}
	return st.Bytes, err
}

// sendTo returns where a download's sending side sends the stream and
// how: to the request's address under its key; in a copy between remote
// hosts, to the address of the connect line that follows the plan; down
// a chain of hosts (Chain), to the first host that the forward line
// names, under its key, going on with the hosts after it should it die.
func sendTo(req Request, br *bufio.Reader, o Options) (string, pipe.SendConfig, error) {
	switch {
	case req.Chain:
		f, err := readForward(br)
		if err == nil && f.To == "" {
			err = conn.Errorf(conn.KindSetup, "read where to pass the stream on", "no host to send it to")
		}
		if err != nil {
			return "", pipe.SendConfig{}, err
		}
		cfg := o.sendConfig(decodeKey(f.Key))
		o.repairing(&cfg, f)
		return f.To, cfg, nil
	case req.ConnectLater:
		addr, err := readConnect(br)
		return addr, o.sendConfig(req.keyBytes()), err
	}
	return req.Connect, o.sendConfig(req.keyBytes()), nil
}

// betweenResult is the sending side's result, in a copy between two
// remote hosts, of its stream to addr: a stream that could not start is a
// setup failure, which, when the receiving host was not reached, the
// local side reports as one host's failure to reach the other (see
// cannotConnect); a stream that went is summed up with -v, as no local
// side has its figures (a resume's partial copies spared skipped bytes,
// -1: it did not resume).
func betweenResult(ctx context.Context, st pipe.Stats, err error, addr string, o Options, skipped int64) error {
	var de *dialError
	switch {
	case err != nil && ctx.Err() == nil && errors.As(err, &de):
		return cannotConnect(addr, de.err)
	case err != nil && ctx.Err() == nil && pipe.Retryable(st, err):
		return &conn.Error{Kind: conn.KindSetup, Err: err}
	case err == nil && o.Verbose:
		fmt.Fprintf(o.Stderr, "rdmacp: sent to %s: %s\n", addr, summary(st, skipped))
	}
	return err
}

// readConnect reads, in a copy between two remote hosts, the connect line
// from br: where the receiving host listens.
func readConnect(br *bufio.Reader) (string, error) {
	var c connectLine
	if err := lineWithin(br, connectWait, &c); err != nil {
		return "", conn.Errorf(conn.KindSetup, "read where to send the stream", "%v", err)
	}
	if err := checkConnect(c.Connect); err != nil {
		return "", conn.Errorf(conn.KindSetup, "read where to send the stream", "%v", err)
	}
	return c.Connect, nil
}

// planSend plans a download's copy of req.Send, patterns expanded (see
// expand; a lone pattern's one path is planned as one source), and opens
// its file in file mode; c is the plan to report, with how many names
// each source gave, unless one each, and how many paths were left out
// (each named on stderr).
func planSend(req Request, stderr io.Writer) (p plan, in *os.File, c Contents, err error) {
	paths, from, err := expand(req.Send)
	if err != nil {
		return plan{}, nil, Contents{}, err
	}
	rules, err := filter.Parse(req.Filter) // validate has checked them
	if err != nil {
		return plan{}, nil, Contents{}, conn.Errorf(conn.KindSetup, requestOp, "%v", err)
	}
	if p, in, err = openSources(paths, req.Recursive, len(req.Send) > 1, rules); err != nil {
		return plan{}, nil, Contents{}, err
	}
	c = p.contents(req.Preserve)
	if counts := p.counts(from, len(req.Send)); p.several && slices.ContainsFunc(counts, func(n int) bool { return n != 1 }) {
		c.Counts = counts // else none, as before patterns: an older local side takes the plan
	}
	c.Left = len(p.left)
	for _, err := range p.left {
		fmt.Fprintf(stderr, "rdmacp: %v: not sent\n", err)
	}
	return p, in, c, nil
}

// resumeSource is a download's resume on the remote side: it reads the
// local side's offer from br, compares it with in, the source, says on
// stdout where the stream starts ("from") and moves in there. It returns
// that place.
func resumeSource(in *os.File, key []byte, br *bufio.Reader, stdout io.Writer) (int64, error) {
	var o offer
	if err := lineWithin(br, offerWait, &o); err != nil {
		return 0, conn.Errorf(conn.KindSetup, "resume", "%v", err)
	}
	if err := o.validate(); err != nil {
		return 0, conn.Errorf(conn.KindSetup, "resume", "the offer: %v", err)
	}
	at, err := seekResume(in, o, key)
	if err != nil {
		return 0, err
	}
	if err := writeFrom(stdout, at); err != nil {
		return 0, conn.Errorf(conn.KindAborted, "resume", "%v", err)
	}
	return at, nil
}

// readOffers reads a tree download's offers from br, up to the one that
// marks their end, into rs.
func readOffers(br *bufio.Reader, rs *resumption) error {
	for {
		var o offer
		if err := lineWithin(br, offerWait, &o); err != nil {
			return conn.Errorf(conn.KindSetup, "resume", "%v", err)
		}
		if o.End {
			return nil
		}
		if err := rs.add(o); err != nil {
			return conn.Errorf(conn.KindSetup, "resume", "%v", err)
		}
	}
}

// session reads the request line from stdin, which must be a download's
// (send) or an upload's, and returns it and the rest of stdin.
func session(stdin io.Reader, send bool) (Request, *bufio.Reader, error) {
	br := bufio.NewReaderSize(stdin, 4096)
	var req Request
	err := within(requestWait, func() (err error) {
		req, err = readRequest(br)
		return err
	})
	switch {
	case err != nil && conn.KindOf(err) == conn.KindInternal:
		return Request{}, nil, conn.Errorf(conn.KindSetup, requestOp, "%v", err)
	case err != nil:
		return Request{}, nil, err
	case req.download() != send:
		return Request{}, nil, conn.Errorf(conn.KindSetup, requestOp, "a download's request for an upload's remote side, or the other way round")
	}
	return req, br, nil
}

// untilEOF returns a context that ends when br (the ssh channel) does:
// the ssh session ended.
func untilEOF(ctx context.Context, br *bufio.Reader) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		io.Copy(io.Discard, br)
		cancel(conn.Errorf(conn.KindAborted, "", "the ssh session ended"))
	}()
	return ctx, cancel
}

// receive serves, with srv (its Listener, Config, Log and Rejoin), the
// one sender that proves the key and writes its stream into s, which it
// puts in place (at dest) when the stream has arrived whole and confirm
// (if not nil) accepts it, and aborts otherwise.
func receive(ctx context.Context, srv server.Server, s sink, confirm func(pipe.Stats) error, dest string) (pipe.Stats, error) {
	srv.Out, srv.Prog, srv.Wait = s.Writer(), "rdmacp", senderWait
	st, err := srv.Serve(ctx)
	if err == nil && confirm != nil {
		err = confirm(st)
	}
	if err != nil {
		s.Abort(st.Bytes)
		return st, notWritable(err, dest)
	}
	if err := s.Finish(); err != nil {
		return st, notWritable(&conn.Error{Kind: conn.KindAborted, Op: "finish " + dest, Err: err}, dest)
	}
	return st, nil
}

// notWritable returns err, a failure to receive into dest, as a setup
// failure (exit code 3, DST not writable) when writing the output or
// finishing it (a tree's extraction) was refused for want of permission or
// by a read-only file system.
func notWritable(err error, dest string) error {
	var ce *conn.Error
	writing := errors.As(err, &ce) && (ce.Op == "write output" || ce.Op == "finish "+dest)
	if writing && (errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)) {
		return &conn.Error{Kind: conn.KindSetup, Op: dest + " is not writable", Err: err}
	}
	return err
}

// lineWithin reads one JSON line from br into v, waiting at most wait for
// it.
func lineWithin(br *bufio.Reader, wait time.Duration, v any) error {
	return within(wait, func() error { return readJSONLine(br, v) })
}

// within runs read, waiting at most wait for it to return. (After a
// timeout read may go on: the caller gives up on what it reads.)
func within(wait time.Duration, read func() error) error {
	done := make(chan error, 1)
	go func() { done <- read() }()
	select {
	case err := <-done:
		return err
	case <-time.After(wait):
		return fmt.Errorf("nothing within %v", wait)
	}
}

// newSink prepares the destination of req.
func newSink(req Request) (sink, error) {
	if req.Mode == modeSparse {
		s, err := newSparseSink(req)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	if req.Mode == modeFile {
		s, err := newFileSink(req)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := newTarSink(req)
	if err != nil {
		return nil, err
	}
	return s, nil
}
