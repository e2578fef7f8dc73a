package cp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Bounds of the remote side's waits.
const (
	requestWait = 30 * time.Second // for the request line, once started
	senderWait  = 60 * time.Second // for the sender to connect and prove the key
)

// Serve runs the remote side of a copy (rdmacp --remote-receive), which
// the local side starts over ssh: it reads the request line from stdin,
// prepares the destination, listens on a port of the system's choice on
// the address the ssh connection arrived on (see listenHost), reports the port on stdout, receives one stream from
// the sender that proves the request's one-time key, puts it in place and
// reports the result on stdout (see status.go). It stops when stdin (the
// ssh channel) ends, and returns the exit code.
func Serve(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	n, err := serve(ctx, stdin, stdout, stderr)
	code := command.ExitCode(err)
	if err != nil {
		writeFail(stdout, code, err.Error())
		return code
	}
	writeOK(stdout, n)
	return code
}

func serve(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (int64, error) {
	br := bufio.NewReaderSize(stdin, 4096)
	req, err := requestWithin(br, requestWait)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		io.Copy(io.Discard, br)
		cancel(conn.Errorf(conn.KindAborted, "", "the ssh session ended"))
	}()
	s, err := newSink(req)
	if err != nil {
		return 0, err
	}
	host, why := listenHost(req, os.Getenv("SSH_CONNECTION"))
	l, port, err := listenAnyPort(ctx, req.Transport, host, defaultParams(), notices(req.Verbose, stderr))
	if err != nil {
		s.Abort()
		return 0, err
	}
	defer l.Close()
	fmt.Fprintf(notices(req.Verbose, stderr), "rdmacp: listening on %s (%s)\n", l.Addr(), why)
	if err := writePort(stdout, port); err != nil {
		s.Abort()
		return 0, conn.Errorf(conn.KindAborted, "report the port", "%v", err)
	}
	cfg := pipe.Config{Key: req.keyBytes(), Timeout: req.Timeout}
	// Only the holder of the one-time key gets past the handshake.
	srv := server.Server{Listener: l, Out: s.Writer(), Config: cfg, Log: stderr, Prog: "rdmacp", Wait: senderWait}
	st, err := srv.Serve(ctx)
	if err != nil {
		s.Abort()
		return st.Bytes, err
	}
	if err := s.Finish(); err != nil {
		return st.Bytes, &conn.Error{Kind: conn.KindAborted, Op: "finish " + req.Dest, Err: err}
	}
	return st.Bytes, nil
}

// requestWithin reads the request line, waiting at most wait for it.
func requestWithin(br *bufio.Reader, wait time.Duration) (Request, error) {
	type read struct {
		req Request
		err error
	}
	done := make(chan read, 1)
	go func() {
		req, err := readRequest(br)
		done <- read{req, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && conn.KindOf(r.err) == conn.KindInternal {
			return Request{}, conn.Errorf(conn.KindSetup, "read request", "%v", r.err)
		}
		return r.req, r.err
	case <-time.After(wait):
		return Request{}, conn.Errorf(conn.KindSetup, "read request", "nothing within %v", wait)
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
