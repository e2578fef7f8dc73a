package command

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"golang.org/x/sys/unix"
)

// SignalContext returns a context that the signals sigs (SIGINT and
// SIGTERM if none) cancel with an "interrupted" cause, so that the engine
// tells the peer before exiting; a second signal exits at once. It also
// makes a write to a closed pipe (stdout) fail with EPIPE instead of
// killing the process, so that a stream is aborted cleanly. stop undoes
// both. It is the commands' one signal handler.
func SignalContext(sigs ...os.Signal) (ctx context.Context, stop func()) {
	if len(sigs) == 0 {
		sigs = []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			cancel(conn.Errorf(conn.KindAborted, "", "interrupted (%s)", unix.SignalName(s.(syscall.Signal))))
		case <-done:
			return
		}
		select {
		case <-ch:
			os.Exit(ExitAborted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		signal.Stop(pipes)
		close(done)
		cancel(nil)
	}
}
