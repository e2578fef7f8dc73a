package rdma

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// acceptAll runs Accept on l until it fails with net.ErrClosed and sends
// every other result on the returned channel; connections are closed when
// the test ends.
func acceptAll(t *testing.T, l *Listener) <-chan accepted {
	ch := make(chan accepted, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept(context.Background())
			if errors.Is(err, net.ErrClosed) {
				return
			}
			a := accepted{err: err}
			if c != nil {
				a.c = c.(*Conn)
				t.Cleanup(func() { c.Close() })
			}
			ch <- a
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return ch
}

// next waits for the next Accept result.
func next(t *testing.T, ch <-chan accepted) accepted {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("Accept returned nothing within 30 s")
		return accepted{}
	}
}

// stall sends a connect request to addr and never completes the
// connection: it never reads the answer, so rdma_cm never sends the RTU.
func stall(t *testing.T, addr string) {
	t.Helper()
	p := conn.NewParams(4096, 4)
	c, err := Dialer{Options: DefaultOptions()}.connect(timeout(t, 10*time.Second), netip.MustParseAddrPort(addr), p, "stall")
	if err != nil {
		t.Fatalf("stalled connect: %v", err)
	}
	t.Cleanup(func() { c.free() })
}

func listenFor(t *testing.T, establish time.Duration) *Listener {
	l, err := listen(timeout(t, 5*time.Second), net.JoinHostPort(rxeIP(t), "0"), conn.NewParams(4096, 4), DefaultOptions(), establish)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestBusy checks that a busy listener refuses senders with a busy error
// and serves them again once it is not busy.
func TestBusy(t *testing.T) {
	p := conn.NewParams(4096, 4)
	l := listenRXE(t, p, DefaultOptions())
	results := acceptAll(t, l)
	for _, tt := range []struct {
		busy bool
		want conn.Kind
	}{{true, conn.KindBusy}, {false, conn.KindSetup}, {true, conn.KindBusy}, {false, conn.KindSetup}} {
		l.SetBusy(tt.busy)
		c, err := Dialer{Options: DefaultOptions()}.Dial(timeout(t, 20*time.Second), l.Addr(), p)
		if !tt.busy {
			if err != nil {
				t.Fatalf("not busy: Dial = %v", err)
			}
			c.Close()
			if a := next(t, results); a.err != nil {
				t.Fatalf("not busy: Accept = %v", a.err)
			}
			continue
		}
		if err == nil {
			c.Close()
			t.Fatal("busy: Dial succeeded")
		}
		if conn.KindOf(err) != conn.KindBusy || !strings.Contains(err.Error(), "busy with another stream") ||
			!strings.Contains(err.Error(), l.Addr()) {
			t.Fatalf("busy: Dial = %v (kind %v), want a KindBusy error naming the address", err, conn.KindOf(err))
		}
		t.Logf("busy: %v", err)
	}
	select {
	case a := <-results:
		t.Fatalf("Accept reported %+v for a busy refusal", a)
	default:
	}
}

// TestStalledPeer checks that a peer that never completes its connection
// holds up nobody: other senders connect while its setup waits, the wait is
// bounded, and a flood of them from one host recycles that host's slots.
func TestStalledPeer(t *testing.T) {
	p := conn.NewParams(4096, 4)
	t.Run("others connect", func(t *testing.T) {
		l := listenFor(t, time.Minute)
		results := acceptAll(t, l)
		stall(t, l.Addr())
		stall(t, l.Addr())
		for range 3 {
			c, err := Dialer{Options: DefaultOptions()}.Dial(timeout(t, 20*time.Second), l.Addr(), p)
			if err != nil {
				t.Fatalf("Dial behind stalled peers: %v", err)
			}
			c.Close()
			if a := next(t, results); a.err != nil {
				t.Fatalf("Accept behind stalled peers: %v", a.err)
			}
		}
		// The last setup releases its slot just after Accept took its Conn.
		testutil.WaitFor(t, 30*time.Second, "only the 2 stalled setups to be in progress", func() bool { return l.inSetup() == 2 })
	})
	t.Run("bounded wait", func(t *testing.T) {
		l := listenFor(t, 300*time.Millisecond)
		results := acceptAll(t, l)
		stall(t, l.Addr())
		a := next(t, results)
		if conn.KindOf(a.err) != conn.KindSetup || !strings.Contains(a.err.Error(), "did not complete the connection") {
			t.Fatalf("Accept = %v, want a KindSetup error about the stalled peer", a.err)
		}
		t.Logf("Accept: %v", a.err)
		testutil.WaitFor(t, 30*time.Second, "the stalled setup to release its slot", func() bool { return l.inSetup() == 0 })
		c, err := Dialer{Options: DefaultOptions()}.Dial(timeout(t, 20*time.Second), l.Addr(), p)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if a := next(t, results); a.err != nil {
			t.Fatal(a.err)
		}
	})
	t.Run("a flood of them", func(t *testing.T) {
		l := listenFor(t, time.Minute)
		results := acceptAll(t, l)
		full := setups().Full
		for range 2 * full {
			stall(t, l.Addr())
			// From one host, they recycle that host's slots.
			if n := l.inSetup(); n > setups().PerSource {
				t.Fatalf("%d setups of one host in progress, at most %d", n, setups().PerSource)
			}
		}
		c, err := Dialer{Options: DefaultOptions()}.Dial(timeout(t, 20*time.Second), l.Addr(), p)
		if err != nil {
			t.Fatalf("Dial behind %d stalled connect requests: %v", 2*full, err)
		}
		c.Close()
		for {
			a := next(t, results)
			if a.err == nil {
				break
			}
			if !errors.Is(a.err, errDropped) && !strings.Contains(a.err.Error(), "did not complete the connection") {
				t.Fatalf("Accept = %v, want the sender, or stalled setups dropped or ended", a.err)
			}
		}
	})
}

// TestFailedSetupsHoldNothing stalls setups from one host while no Accept
// waits: each ends (dropped, or its peer late) without waiting for an
// Accept, so no slot stays taken; the failures are reported
// (conn.ErrRefused) as many as the backlog holds, and a sender from the
// same host still connects.
func TestFailedSetupsHoldNothing(t *testing.T) {
	if iwarp() {
		t.Skip("iWARP connections are established by the kernel: a dialer cannot stall its setup")
	}
	p := conn.NewParams(4096, 4)
	l := listenFor(t, 200*time.Millisecond)
	for range 3 * setups().PerSource {
		stall(t, l.Addr())
	}
	testutil.WaitFor(t, 30*time.Second, "the failed setups to end", func() bool { return l.inSetup() == 0 })
	// A setup leaves before it reports its failure.
	testutil.WaitFor(t, 30*time.Second, "a refusal reported", func() bool { return len(l.refused) > 0 })
	for len(l.refused) > 0 {
		if err := <-l.refused; !errors.Is(err, conn.ErrRefused) {
			t.Errorf("reported %v, want a refusal", err)
		}
	}
	results := acceptAll(t, l)
	c, err := Dialer{Options: DefaultOptions()}.Dial(timeout(t, 20*time.Second), l.Addr(), p)
	if err != nil {
		t.Fatalf("a sender from the failing host: %v", err)
	}
	c.Close()
	for {
		a := next(t, results)
		if a.err == nil {
			return
		}
		if !errors.Is(a.err, conn.ErrRefused) { // a failed setup's late report
			t.Fatalf("Accept = %v, want the sender", a.err)
		}
	}
}

// TestFloodSparesEstablished checks that a connection its sender
// completed, waiting for Accept, is never dropped for the connect requests
// that arrive after it, however many.
func TestFloodSparesEstablished(t *testing.T) {
	if iwarp() {
		t.Skip("iWARP connections are established by the kernel: a dialer cannot stall its setup")
	}
	p := conn.NewParams(4096, 4)
	l := listenFor(t, time.Minute)
	c, err := Dialer{Options: DefaultOptions()}.Dial(timeout(t, 20*time.Second), l.Addr(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testutil.WaitFor(t, 30*time.Second, "the listener to see the connection completed", func() bool { return l.established.Load() == 1 })
	for range 2 * setups().Full {
		stall(t, l.Addr())
	}
	testutil.WaitFor(t, 30*time.Second, "the flood's setups to be in progress", func() bool { return l.inSetup() == 1+setups().PerSource })
	results := acceptAll(t, l)
	for {
		a := next(t, results)
		if a.err == nil {
			if a.c.Info().Remote != c.Info().Local {
				t.Fatalf("accepted %s, want the sender %s", a.c.Info().Remote, c.Info().Local)
			}
			return
		}
		if !errors.Is(a.err, errDropped) {
			t.Fatalf("Accept = %v, want the sender, or stalled setups dropped", a.err)
		}
	}
}

// inSetup returns the number of setups in progress.
func (l *Listener) inSetup() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending.Len()
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("cannot count open files: %v", err)
	}
	return len(ents)
}

// TestListenerCloseDuringSetup checks that Close ends the setups in
// progress, frees what they allocated and unblocks Accept.
func TestListenerCloseDuringSetup(t *testing.T) {
	if iwarp() {
		t.Skip("iWARP connections are established by the kernel: a dialer cannot stall its setup")
	}
	p := conn.NewParams(4096, 4)
	pair(t, p, p, DefaultOptions()) // opens the device's contexts for good
	before := openFDs(t)
	func() {
		l, err := listen(timeout(t, 5*time.Second), net.JoinHostPort(rxeIP(t), "0"), p, DefaultOptions(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addr := l.Addr()
		// The stalled dialers are freed by the Cleanup of a subtest, so
		// that the descriptors can be counted after them.
		t.Run("stall", func(t *testing.T) {
			stall(t, addr)
			stall(t, addr)
			testutil.WaitFor(t, 30*time.Second, "both setups to start", func() bool { return l.inSetup() == 2 })
			accErr := make(chan error, 1)
			go func() {
				_, err := l.Accept(context.Background())
				accErr <- err
			}()
			closed := make(chan error, 1)
			go func() { closed <- l.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Close still blocked after 30 s with setups in progress")
			}
			if err := <-accErr; !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Accept = %v, want net.ErrClosed", err)
			}
			if n := l.inSetup(); n != 0 {
				t.Fatalf("%d setups still in progress after Close", n)
			}
		})
	}()
	if after := openFDs(t); after != before {
		t.Errorf("%d open files before the listener, %d after closing it", before, after)
	}
}
