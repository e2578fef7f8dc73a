package app

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/pipe"
)

// signalContext returns a context that SIGINT or SIGTERM cancels with an
// "interrupted" cause, so that the engine tells the peer before exiting; a
// second signal exits at once. It also makes a write to a closed stdout
// fail with EPIPE instead of killing the process, so that the receiver can
// abort the stream cleanly. stop undoes both.
func signalContext() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(pipe.Errorf(pipe.KindAborted, "", "interrupted (%s)", unix.SignalName(s.(syscall.Signal))))
		case <-done:
			return
		}
		select {
		case <-sigs:
			os.Exit(ExitAborted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		signal.Stop(pipes)
		close(done)
		cancel(nil)
	}
}
