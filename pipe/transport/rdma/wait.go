package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// waiter sleeps until a file descriptor owned by C (an rdma_cm event channel
// or a completion channel) becomes readable. It uses the Go netpoller on a
// non-blocking duplicate of the descriptor, so a waiting goroutine holds no
// OS thread, and it can be interrupted from other goroutines.
type waiter struct {
	f  *os.File
	rc syscall.RawConn
}

// newWaiter sets fd non-blocking (the flag belongs to the open file, so C
// calls on fd stop blocking too) and registers a duplicate with the netpoller.
func newWaiter(fd C.int, name string) (*waiter, error) {
	if err := unix.SetNonblock(int(fd), true); err != nil {
		return nil, fmt.Errorf("set %s non-blocking: %w", name, err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", name, err)
	}
	f := os.NewFile(uintptr(dup), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("poll %s: %w", name, err)
	}
	return &waiter{f: f, rc: rc}, nil
}

// wait calls try until it reports success, sleeping until the descriptor is
// readable whenever it does not. It gives up with the error of stop (which
// may be nil) or of ctx, checked whenever the wait is interrupted, or with an
// error when the waiter is closed.
func (w *waiter) wait(ctx context.Context, stop func() error, try func() bool) error {
	for {
		// Clear an old interrupt first, then check the reasons for one:
		// whoever interrupts sets its reason before the deadline.
		if err := w.f.SetReadDeadline(time.Time{}); err != nil {
			return err
		}
		if stop != nil {
			if err := stop(); err != nil {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		unhook := context.AfterFunc(ctx, w.interrupt)
		err := w.rc.Read(func(uintptr) bool { return try() })
		unhook()
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}

// interrupt wakes a pending wait, which then checks its stop function and
// context and goes back to sleep if neither says to stop.
func (w *waiter) interrupt() { w.f.SetReadDeadline(time.Unix(1, 0)) }

// close unregisters and closes the duplicate descriptor, ending any wait.
// The C object owning the original descriptor is freed separately.
func (w *waiter) close() {
	if w != nil {
		w.f.Close()
	}
}

// event is a CM event copied out of librdmacm (and already acknowledged).
type event = C.struct_rp_event

// eventChannel is an rdma_cm event channel with its waiter.
type eventChannel struct {
	ch *C.struct_rdma_event_channel
	w  *waiter
}

// newEventChannel creates a non-blocking rdma_cm event channel.
func newEventChannel() (*eventChannel, error) {
	var ch *C.struct_rdma_event_channel
	if rc := C.rp_create_channel(&ch); rc != 0 {
		return nil, fmt.Errorf("rdma_create_event_channel: %w", errno(rc))
	}
	w, err := newWaiter(ch.fd, "rdma_cm")
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, err
	}
	return &eventChannel{ch: ch, w: w}, nil
}

// next waits for the next event until ctx ends or the channel is closed.
func (e *eventChannel) next(ctx context.Context) (event, error) {
	var ev event
	var cerr error
	err := e.w.wait(ctx, nil, func() bool {
		rc := C.rp_get_event(e.ch, &ev)
		if rc == -C.EAGAIN {
			return false
		}
		if rc != 0 {
			cerr = fmt.Errorf("rdma_get_cm_event: %w", errno(rc))
		}
		return true
	})
	if err == nil {
		err = cerr
	}
	return ev, err
}

// destroy closes the waiter and destroys the channel. Every id on the
// channel must have been destroyed or migrated.
func (e *eventChannel) destroy() {
	if e != nil {
		e.w.close()
		C.rdma_destroy_event_channel(e.ch)
	}
}

// eventName names a CM event type for messages, e.g. "RDMA_CM_EVENT_REJECTED".
func eventName(ev *event) string {
	return C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(ev._type)))
}

// privateData returns the private data of a connection event.
func privateData(ev *event) []byte {
	return C.GoBytes(unsafe.Pointer(&ev.priv[0]), ev.priv_len)
}
