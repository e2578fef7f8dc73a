package cp

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/app"
	"github.com/rdmapipe/rdmapipe/pipe"
)

// signalContext returns a context that the signals cancel with an
// "interrupted" cause, so that the stream is aborted cleanly and the peer
// told; a second signal exits at once. stop undoes it.
func signalContext(sigs ...os.Signal) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			cancel(pipe.Errorf(pipe.KindAborted, "", "interrupted (%s)", unix.SignalName(s.(syscall.Signal))))
		case <-done:
			return
		}
		select {
		case <-ch:
			os.Exit(app.ExitAborted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}
