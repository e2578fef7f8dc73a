package rdma

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// The tests below that need RDMA run only where RXE_IP is set: inside the
// SoftRoCE VM (test/softroce), which sets RXE_DEV=rxe0 and RXE_IP=10.0.3.1.

// rxeIP returns the address of the test RDMA device or skips the test.
func rxeIP(t testing.TB) string {
	ip := os.Getenv("RXE_IP")
	if ip == "" {
		t.Skip("RXE_IP not set: RDMA tests run in the SoftRoCE VM (test/softroce)")
	}
	return ip
}

func timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// listenRXE listens on RXE_IP at a port chosen by rdma_cm.
func listenRXE(t testing.TB, local conn.Params, opt Options) *Listener {
	l, err := Listen(timeout(t, 5*time.Second), net.JoinHostPort(rxeIP(t), "0"), local, opt)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// pair connects a sender proposing proposal to a receiver configured with
// local and returns both ends.
func pair(t testing.TB, local, proposal conn.Params, opt Options) (snd, rcv conn.Conn) {
	l := listenRXE(t, local, opt)
	snd, rcv, err, aerr := dialAccept(timeout(t, 20*time.Second), l, Dialer{Options: opt}, proposal)
	if err != nil || aerr != nil {
		t.Fatalf("Dial: %v; Accept: %v", err, aerr)
	}
	t.Cleanup(func() { snd.Close(); rcv.Close() })
	return snd, rcv
}

// dialAccept dials l with d while l accepts, and returns both ends (nil
// where that side failed) and both errors. The receiver's window is open
// and the sender knows it, as after the engine's handshake.
func dialAccept(ctx context.Context, l *Listener, d Dialer, proposal conn.Params) (snd, rcv conn.Conn, dialErr, acceptErr error) {
	return dialAcceptAt(ctx, l, d, l.Addr(), proposal)
}

// dialAcceptAt is dialAccept with the dialer connecting to addr, an address
// of l (which may listen on every address).
func dialAcceptAt(ctx context.Context, l *Listener, d Dialer, addr string, proposal conn.Params) (snd, rcv conn.Conn, dialErr, acceptErr error) {
	snd, rcv, dialErr, acceptErr = connectTo(ctx, l, d, addr, proposal)
	if dialErr != nil || acceptErr != nil {
		return snd, rcv, dialErr, acceptErr
	}
	desc, err := rcv.(*Conn).OpenWindow()
	if err != nil {
		return snd, rcv, nil, err
	}
	return snd, rcv, snd.(*Conn).SetWindow(desc), nil
}

// connect is dialAccept without opening the receiver's window.
func connect(ctx context.Context, l *Listener, d Dialer, proposal conn.Params) (snd, rcv conn.Conn, dialErr, acceptErr error) {
	return connectTo(ctx, l, d, l.Addr(), proposal)
}

// connectTo is dialAcceptAt without opening the receiver's window.
func connectTo(ctx context.Context, l *Listener, d Dialer, addr string, proposal conn.Params) (snd, rcv conn.Conn, dialErr, acceptErr error) {
	type result struct {
		c   conn.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := l.Accept(ctx)
		accepted <- result{c, err}
	}()
	snd, dialErr = d.Dial(ctx, addr, proposal)
	a := <-accepted
	return snd, a.c, dialErr, a.err
}

// poll waits for one completion.
func poll(t testing.TB, c conn.Conn) conn.Completion {
	t.Helper()
	cs := make([]conn.Completion, 1)
	n, err := c.Poll(timeout(t, 10*time.Second), cs)
	if err != nil || n != 1 {
		t.Fatalf("Poll: %d, %v", n, err)
	}
	return cs[0]
}

// blockedPoll starts a Poll of c under ctx and returns once it waits for
// completions; the channel gets what it returns.
func blockedPoll(t *testing.T, ctx context.Context, c conn.Conn) <-chan error {
	t.Helper()
	rc := c.(*Conn)
	before := rc.poll.waits.Load()
	done := make(chan error, 1)
	go func() {
		_, err := c.Poll(ctx, make([]conn.Completion, 4))
		done <- err
	}()
	testutil.WaitFor(t, 30*time.Second, "Poll to wait for completions", func() bool { return rc.poll.waits.Load() > before })
	return done
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed*7 + i*13)
	}
}

func TestAvailableNoRDMA(t *testing.T) {
	if os.Getenv("RXE_DEV") != "" {
		t.Skip("RXE_DEV is set: this host has RDMA")
	}
	err := Available()
	if err == nil {
		t.Skip("this host has an RDMA device")
	}
	if conn.KindOf(err) != conn.KindNoRDMA || !strings.Contains(err.Error(), "RDMA") {
		t.Fatalf("Available() = %v (kind %v), want a KindNoRDMA error", err, conn.KindOf(err))
	}
	t.Logf("Available: %v", err)
}

func TestAvailable(t *testing.T) {
	if os.Getenv("RXE_DEV") == "" {
		t.Skip("RXE_DEV not set")
	}
	if err := Available(); err != nil {
		t.Fatalf("Available() = %v", err)
	}
}

// TestNoRDMA checks that addresses without an RDMA device fail with
// KindNoRDMA, the signal for falling back to TCP.
func TestNoRDMA(t *testing.T) {
	vm := os.Getenv("RXE_DEV") != ""
	p := conn.NewParams(4096, 4)
	tests := []struct {
		name   string
		vmToo  bool // also in the VM, where rxe0 exists but not on loopback
		listen bool
		addr   string
	}{
		{"dial ip", false, false, "10.0.3.1:18800"},
		{"dial name", false, false, "localhost:18800"},
		{"listen any", false, true, ":0"},
		{"dial loopback", true, false, "127.0.0.1:18800"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if vm && !tt.vmToo {
				t.Skip("this host has RDMA")
			}
			ctx := timeout(t, 10*time.Second)
			var err error
			if tt.listen {
				var l *Listener
				if l, err = Listen(ctx, tt.addr, p, DefaultOptions()); err == nil {
					l.Close()
				}
			} else {
				var c conn.Conn
				if c, err = (Dialer{Options: DefaultOptions()}).Dial(ctx, tt.addr, p); err == nil {
					c.Close()
				}
			}
			if conn.KindOf(err) != conn.KindNoRDMA {
				t.Fatalf("got %v (kind %v), want kind %v", err, conn.KindOf(err), conn.KindNoRDMA)
			}
			t.Logf("%v", err)
		})
	}
}

// TestNoRDMAInterface checks the case --transport auto falls back for on
// a host with RDMA: an address on an interface without an RDMA device. It
// adds a dummy interface, so it runs only as root with SoftRoCE (the VM).
func TestNoRDMAInterface(t *testing.T) {
	rxeIP(t)
	if !strings.HasPrefix(os.Getenv("RXE_DEV"), "rxe") {
		t.Skip("adds an interface beside SoftRoCE's: runs over rxe, not over siw")
	}
	if os.Geteuid() != 0 {
		testutil.Unmet(t, "needs root to add a test interface")
	}
	const ifname, ip = "rdmatest0", "10.0.4.1"
	for _, args := range [][]string{
		{"link", "add", ifname, "type", "dummy"},
		{"addr", "add", ip + "/24", "dev", ifname},
		{"link", "set", ifname, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	defer exec.Command("ip", "link", "del", ifname).Run()
	p := conn.NewParams(4096, 4)
	ctx := timeout(t, 10*time.Second)
	l, err := Listen(ctx, ip+":0", p, DefaultOptions())
	if err == nil {
		l.Close()
	}
	if conn.KindOf(err) != conn.KindNoRDMA {
		t.Errorf("Listen = %v (kind %v), want kind %v", err, conn.KindOf(err), conn.KindNoRDMA)
	}
	t.Logf("listen: %v", err)
	_, err = Dialer{Options: DefaultOptions()}.Dial(ctx, ip+":18800", p)
	if conn.KindOf(err) != conn.KindNoRDMA {
		t.Errorf("Dial = %v (kind %v), want kind %v", err, conn.KindOf(err), conn.KindNoRDMA)
	}
	t.Logf("dial: %v", err)
}

// TestListenAny listens on all addresses and dials the RDMA address, over
// IPv4 and, if the RDMA interface has one, its IPv6 link-local address.
func TestListenAny(t *testing.T) {
	ip := rxeIP(t)
	p := conn.NewParams(4096, 4)
	l, err := Listen(timeout(t, 5*time.Second), ":0", p, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr())
	t.Logf("listening on %s", l.Addr())
	addrs := []string{net.JoinHostPort(ip, port)}
	if ll := linkLocal(ip); ll != "" {
		addrs = append(addrs, net.JoinHostPort(ll, port))
	}
	for _, addr := range addrs {
		t.Run(addr, func(t *testing.T) {
			ctx := timeout(t, 10*time.Second)
			accErr := make(chan error, 1)
			go func() {
				c, err := l.Accept(ctx)
				if err == nil {
					t.Logf("accepted %+v", c.Info())
					c.Close()
				}
				accErr <- err
			}()
			c, err := Dialer{Options: DefaultOptions()}.Dial(ctx, addr, p)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			if err := <-accErr; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// linkLocal returns the IPv6 link-local address, with zone, of the
// interface that has ip, or "".
func linkLocal(ip string) string {
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		var has bool
		var ll string
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				has = has || n.IP.String() == ip
				if n.IP.IsLinkLocalUnicast() && n.IP.To4() == nil {
					ll = n.IP.String() + "%" + ifi.Name
				}
			}
		}
		if has {
			return ll
		}
	}
	return ""
}

func TestExchange(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			opt := DefaultOptions()
			opt.BusyPoll = busy
			p := conn.NewParams(64<<10, 4)
			snd, rcv := pair(t, p, p, opt)
			full := len(snd.SendBuf(0))
			if len(rcv.RecvBuf(0)) != full {
				t.Fatalf("receive buffer %d bytes, send buffer %d", len(rcv.RecvBuf(0)), full)
			}
			for _, n := range []int{0, 1, 100, full - 1, full} {
				buf := n % snd.SendBufs()
				fill(snd.SendBuf(buf)[:n], n)
				if err := snd.PostSend(buf, n); err != nil {
					t.Fatal(err)
				}
				r := poll(t, rcv)
				if r.Op != conn.OpRecv || r.Len != n {
					t.Fatalf("receiver got %+v, want a %d-byte receive", r, n)
				}
				want := make([]byte, n)
				fill(want, n)
				if !bytes.Equal(rcv.RecvBuf(r.Buf)[:n], want) {
					t.Fatalf("%d-byte message damaged", n)
				}
				if err := rcv.PostRecv(r.Buf); err != nil {
					t.Fatal(err)
				}
				if s := poll(t, snd); s != (conn.Completion{Op: conn.OpSend, Buf: buf, Len: n}) {
					t.Fatalf("sender got %+v, want send of buffer %d, %d bytes", s, buf, n)
				}
			}
		})
	}
}

// stream sends count messages of varying size from snd to rcv the way the
// engine does: at most the negotiated credits in flight, the receiver
// returning one credit per message with SendControl after reposting its
// buffer.
func stream(t testing.TB, snd, rcv conn.Conn, count int, size func(i int) int) {
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			cs := make([]conn.Completion, 8)
			ctx := context.Background()
			for got := 0; got < count; {
				n, err := rcv.Poll(ctx, cs)
				if err != nil {
					return err
				}
				for _, c := range cs[:n] {
					if c.Op != conn.OpRecv {
						return fmt.Errorf("receiver got %+v", c)
					}
					b := rcv.RecvBuf(c.Buf)[:c.Len]
					if want := size(got); c.Len != want || (want >= 8 && int(b[0])|int(b[1])<<8|int(b[2])<<16 != got) {
						return fmt.Errorf("message %d: %d bytes, want %d", got, c.Len, want)
					}
					got++
					if err := rcv.PostRecv(c.Buf); err != nil {
						return err
					}
					if err := rcv.SendControl(context.Background(), []byte{1}); err != nil {
						return err
					}
				}
			}
			return nil
		}()
	}()

	ctx := timeout(t, 120*time.Second)
	free := make([]int, snd.SendBufs())
	for i := range free {
		free[i] = i
	}
	info := snd.Info()
	credits := conn.NewParams(info.Chunk, info.Depth).Credits()
	cs := make([]conn.Completion, 8)
	for sent, acked := 0, 0; acked < count; {
		for sent < count && credits > 0 && len(free) > 0 {
			buf := free[len(free)-1]
			free = free[:len(free)-1]
			n := size(sent)
			if n >= 8 {
				b := snd.SendBuf(buf)
				b[0], b[1], b[2] = byte(sent), byte(sent>>8), byte(sent>>16)
			}
			if err := snd.PostSend(buf, n); err != nil {
				t.Fatal(err)
			}
			sent++
			credits--
		}
		n, err := snd.Poll(ctx, cs)
		if err != nil {
			t.Fatalf("sender Poll after %d sent, %d acked: %v", sent, acked, err)
		}
		for _, c := range cs[:n] {
			switch c.Op {
			case conn.OpSend:
				free = append(free, c.Buf)
				acked++
			case conn.OpRecv:
				credits += int(snd.RecvBuf(c.Buf)[0])
				if err := snd.PostRecv(c.Buf); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestManyInOrder(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			opt := DefaultOptions()
			opt.BusyPoll = busy
			p := conn.NewParams(4096, 4)
			snd, rcv := pair(t, p, p, opt)
			size := len(snd.SendBuf(0))
			stream(t, snd, rcv, 3000, func(i int) int { return 8 + i*97%(size-7) })
		})
	}
}

// iwarp reports whether the test device is an iWARP device (node type RNIC).
func iwarp() bool {
	b, _ := os.ReadFile("/sys/class/infiniband/" + os.Getenv("RXE_DEV") + "/node_type")
	return strings.Contains(string(b), "RNIC")
}

func TestControl(t *testing.T) {
	p := conn.NewParams(4096, 4)
	snd, rcv := pair(t, p, p, DefaultOptions())
	if err := rcv.SendControl(context.Background(), make([]byte, conn.MaxControl+1)); conn.KindOf(err) != conn.KindInternal {
		t.Fatalf("oversized SendControl: %v", err)
	}
	// Far more control messages than control buffers (16): SendControl
	// must wait for free buffers. On InfiniBand and RoCE also far more than
	// the sender has receives posted (Depth+4): late receives must only
	// delay the receiver (RNR retry). iWARP has no RNR retry, a message
	// without a posted receive ends the connection, so there the test
	// keeps within the posted receives, as the engine's credits do.
	const count = 200
	window := count
	if iwarp() {
		window = snd.RecvBufs()
	}
	posted := make(chan struct{}, window)
	for range window {
		posted <- struct{}{}
	}
	size := func(i int) int { return 1 + i*37%conn.MaxControl }
	var sent atomic.Int64 // control messages the receiver has posted
	errc := make(chan error, 1)
	go func() {
		for i := range count {
			<-posted
			msg := make([]byte, size(i))
			fill(msg, i)
			if err := rcv.SendControl(context.Background(), msg); err != nil {
				errc <- err
				return
			}
			sent.Add(1)
		}
		errc <- nil
	}()
	for i := range count {
		c := poll(t, snd)
		want := make([]byte, size(i))
		fill(want, i)
		if c.Op != conn.OpRecv || !bytes.Equal(snd.RecvBuf(c.Buf)[:c.Len], want) {
			t.Fatalf("control message %d: got %+v", i, c)
		}
		// Every tenth message, keep its buffer from snd until rcv has
		// posted message past: snd's other receives hold at most the
		// messages before it, so it waits on RNR retry. iWARP's window
		// keeps rcv from posting it, so there the test does not wait.
		if past := i + snd.RecvBufs(); i%10 == 0 && past < window {
			testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("the receiver to post control message %d, beyond the receives posted", past),
				func() bool { return sent.Load() > int64(past) })
		}
		if err := snd.PostRecv(c.Buf); err != nil {
			t.Fatal(err)
		}
		select {
		case posted <- struct{}{}:
		default:
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// Control completions are never reported to the receiver.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if n, err := rcv.Poll(ctx, make([]conn.Completion, 4)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receiver Poll = %d, %v; want a timeout", n, err)
	}
}

func TestNegotiation(t *testing.T) {
	tests := []struct {
		name            string
		local, proposal conn.Params
		want            conn.Params
	}{
		{"receiver smaller", conn.NewParams(4096, 8), conn.NewParams(65536, 4), conn.NewParams(4096, 4)},
		{"sender smaller", conn.NewParams(1<<20, 16), conn.NewParams(1000, 3), conn.NewParams(1000, 3)},
		{"equal", conn.NewParams(8192, 3), conn.NewParams(8192, 3), conn.NewParams(8192, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snd, rcv := pair(t, tt.local, tt.proposal, DefaultOptions())
			for _, c := range []conn.Conn{snd, rcv} {
				if i := c.Info(); i.Chunk != tt.want.Chunk || i.Depth != tt.want.Depth {
					t.Errorf("Info chunk %d depth %d, want %d %d", i.Chunk, i.Depth, tt.want.Chunk, tt.want.Depth)
				}
			}
			sl, rl := conn.SenderLayout(tt.proposal), conn.ReceiverLayout(tt.want)
			if snd.SendBufs() != sl.SendBufs || len(snd.SendBuf(0)) != sl.SendSize ||
				snd.RecvBufs() != sl.RecvBufs || len(snd.RecvBuf(0)) != sl.RecvSize {
				t.Errorf("sender buffers do not match %+v", sl)
			}
			if rcv.SendBufs() != 0 || rcv.RecvBufs() != rl.RecvBufs || len(rcv.RecvBuf(0)) != rl.RecvSize {
				t.Errorf("receiver buffers do not match %+v", rl)
			}
			stream(t, snd, rcv, 50, func(int) int { return conn.TrailerLen + tt.want.Chunk })
		})
	}
}

func TestVersionMismatch(t *testing.T) {
	p := conn.NewParams(4096, 4)
	l := listenRXE(t, p, DefaultOptions())
	ctx := timeout(t, 10*time.Second)
	accErr := make(chan error, 1)
	go func() {
		_, err := l.Accept(ctx)
		accErr <- err
	}()
	bad := p
	bad.Version = conn.Version + 1
	_, err := Dialer{Options: DefaultOptions()}.Dial(ctx, l.Addr(), bad)
	if conn.KindOf(err) != conn.KindSetup || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("Dial = %v, want a KindSetup error about the protocol version", err)
	}
	t.Logf("dialer: %v", err)
	err = <-accErr
	if conn.KindOf(err) != conn.KindSetup || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("Accept = %v, want a KindSetup error about the protocol version", err)
	}
	t.Logf("listener: %v", err)

	// The listener keeps serving.
	go func() {
		c, err := l.Accept(ctx)
		if err == nil {
			defer c.Close()
		}
		accErr <- err
	}()
	c, err := Dialer{Options: DefaultOptions()}.Dial(ctx, l.Addr(), p)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-accErr; err != nil {
		t.Fatal(err)
	}
}

func TestDialErrors(t *testing.T) {
	ip := rxeIP(t)
	p := conn.NewParams(4096, 4)
	otherDev := DefaultOptions()
	otherDev.Device = "mlx5_9"
	badPort := DefaultOptions()
	badPort.IBPort = 7
	badGID := DefaultOptions()
	badGID.GIDIndex = 0 // RoCE: the link-local GID, rdma_cm uses the IPv4 one; iWARP: no GIDs
	tests := []struct {
		name string
		opt  Options
		addr string
		want string
	}{
		{"nothing listening", DefaultOptions(), net.JoinHostPort(ip, "18899"), "by peer (nothing listening?)"},
		{"device", otherDev, net.JoinHostPort(ip, "18899"), "not on the requested device mlx5_9"},
		{"port", badPort, net.JoinHostPort(ip, "18899"), "not on the requested port 7"},
		{"gid", badGID, net.JoinHostPort(ip, "18899"), "GID index 0"},
		{"no port", DefaultOptions(), ip, "missing port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Dialer{Options: tt.opt}.Dial(timeout(t, 10*time.Second), tt.addr, p)
			if conn.KindOf(err) != conn.KindSetup || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Dial = %v (kind %v), want a KindSetup error containing %q", err, conn.KindOf(err), tt.want)
			}
			t.Logf("%v", err)
		})
	}
}

func TestInfo(t *testing.T) {
	p := conn.NewParams(4096, 4)
	snd, rcv := pair(t, p, p, DefaultOptions())
	si, ri := snd.Info(), rcv.Info()
	dev := os.Getenv("RXE_DEV")
	for _, i := range []conn.Info{si, ri} {
		if i.Transport != "rdma" || i.Device != dev || i.Port != 1 || i.Chunk != 4096 || i.Depth != 4 {
			t.Errorf("Info = %+v", i)
		}
	}
	if si.Local != ri.Remote || si.Remote != ri.Local || !strings.HasPrefix(si.Remote, rxeIP(t)+":") {
		t.Errorf("addresses do not match: sender %+v, receiver %+v", si, ri)
	}
	t.Logf("sender %+v", si)
}

func TestPeerClose(t *testing.T) {
	for _, who := range []string{"sender", "receiver"} {
		t.Run(who+" closes", func(t *testing.T) {
			p := conn.NewParams(4096, 4)
			snd, rcv := pair(t, p, p, DefaultOptions())
			closer, other := snd, rcv
			if who == "receiver" {
				closer, other = rcv, snd
			}
			done := blockedPoll(t, context.Background(), other)
			start := time.Now()
			if err := closer.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if conn.KindOf(err) != conn.KindAborted || !strings.Contains(err.Error(), "peer disconnected") {
					t.Fatalf("Poll = %v, want a KindAborted peer-disconnected error", err)
				}
				t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
			case <-time.After(5 * time.Second):
				t.Fatal("Poll still blocked 5 s after the peer closed")
			}
		})
	}
}

func TestCloseUnblocksPoll(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			opt := DefaultOptions()
			opt.BusyPoll = busy
			p := conn.NewParams(4096, 4)
			snd, _ := pair(t, p, p, opt)
			done := blockedPoll(t, context.Background(), snd)
			if err := snd.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, conn.ErrClosed) {
					t.Fatalf("Poll = %v, want conn.ErrClosed", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("Close did not unblock Poll")
			}
			if err := snd.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, err := snd.Poll(context.Background(), make([]conn.Completion, 1)); !errors.Is(err, conn.ErrClosed) {
				t.Fatalf("Poll after Close = %v", err)
			}
			if err := snd.PostSend(0, 1); !errors.Is(err, conn.ErrClosed) {
				t.Fatalf("PostSend after Close = %v", err)
			}
		})
	}
}

func TestPollContext(t *testing.T) {
	p := conn.NewParams(4096, 4)
	snd, _ := pair(t, p, p, DefaultOptions())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := blockedPoll(t, ctx, snd)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Poll = %v, want context.Canceled", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Poll still blocked 3 s after its context ended")
	}
	// The connection still works afterwards.
	if err := snd.SendControl(context.Background(), []byte{1}); err != nil {
		t.Fatal(err)
	}
}

func TestListenerClose(t *testing.T) {
	l := listenRXE(t, conn.NewParams(4096, 4), DefaultOptions())
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept(context.Background())
		done <- err
	}()
	testutil.WaitFor(t, 30*time.Second, "Accept to wait", func() bool { return l.acceptWaits.Load() > 0 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept = %v, want net.ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not unblock Accept")
	}
}

// TestHelperProcess is the child process of the tests below.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("RDMA_TEST_CHILD")
	if mode == "" {
		t.Skip("helper for other tests")
	}
	ctx := timeout(t, 30*time.Second)
	p := conn.NewParams(1<<20, 4)
	if _, err := fmt.Sscanf(os.Getenv("RDMA_TEST_PARAMS"), "%d x %d", &p.Chunk, &p.Depth); err != nil && os.Getenv("RDMA_TEST_PARAMS") != "" {
		t.Fatalf("RDMA_TEST_PARAMS: %v", err)
	}
	switch mode {
	case "dial":
		c, err := Dialer{Options: DefaultOptions()}.Dial(ctx, os.Getenv("RDMA_TEST_ADDR"), p)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("connected", c.Info().Local)
		time.Sleep(time.Minute)
	case "memlock-dial":
		_, err := Dialer{Options: DefaultOptions()}.Dial(ctx, os.Getenv("RDMA_TEST_ADDR"), p)
		fmt.Printf("result kind=%d local=%v %v\n", conn.KindOf(err), errors.Is(err, conn.ErrLocal), err)
	case "memlock-accept", "memlock-busy":
		l, err := Listen(ctx, net.JoinHostPort(rxeIP(t), "0"), p, DefaultOptions())
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		l.SetBusy(mode == "memlock-busy")
		fmt.Println("listening", l.Addr())
		// The window is registered when the engine opens it, so the
		// limit may bite there rather than in the accept.
		var c conn.Conn
		if c, err = l.Accept(ctx); err == nil {
			_, err = c.(*Conn).OpenWindow()
		}
		fmt.Printf("result kind=%d local=%v %v\n", conn.KindOf(err), errors.Is(err, conn.ErrLocal), err)
	case "pinned-dial":
		c, err := Dialer{Options: DefaultOptions()}.Dial(ctx, os.Getenv("RDMA_TEST_ADDR"), p)
		printPinned(c, err)
	case "pinned-accept":
		l, err := Listen(ctx, net.JoinHostPort(rxeIP(t), "0"), p, DefaultOptions())
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("listening", l.Addr())
		c, err := l.Accept(ctx)
		if err == nil {
			_, err = c.(*Conn).OpenWindow()
		}
		printPinned(c, err)
	}
	os.Exit(0)
}

// printPinned prints the result line of a pinned-* helper: what c pins,
// or how it failed.
func printPinned(c conn.Conn, err error) {
	if err != nil {
		fmt.Printf("result kind=%d local=%v %v\n", conn.KindOf(err), errors.Is(err, conn.ErrLocal), err)
		return
	}
	fmt.Printf("result pinned %d\n", c.Info().Pinned)
}

// child starts this test binary as a helper process, optionally under a
// wrapper command, and returns it with its stdout.
func child(t *testing.T, mode, addr string, wrapper ...string) (*exec.Cmd, *bufio.Reader) {
	args := append(wrapper, os.Args[0], "-test.run=^TestHelperProcess$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "RDMA_TEST_CHILD="+mode, "RDMA_TEST_ADDR="+addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewReader(out)
}

// expectLine reads lines from r until one starts with prefix.
func expectLine(t *testing.T, r *bufio.Reader, prefix string) string {
	for {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(strings.TrimPrefix(line, prefix))
		}
		if err != nil {
			t.Fatalf("child ended without %q: %v", prefix, err)
		}
	}
}

func TestPeerKilled(t *testing.T) {
	p := conn.NewParams(1<<20, 4)
	l := listenRXE(t, p, DefaultOptions())
	cmd, out := child(t, "dial", l.Addr())
	c, err := l.Accept(timeout(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	expectLine(t, out, "connected")
	done := blockedPoll(t, context.Background(), c)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGKILL)
	select {
	case err := <-done:
		if conn.KindOf(err) != conn.KindAborted {
			t.Fatalf("Poll = %v, want a KindAborted error", err)
		}
		t.Logf("Poll returned %v after the kill: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatal("Poll still blocked 10 s after the peer was killed")
	}
}

// TestMemlock runs each side in a child process without CAP_IPC_LOCK and
// with a 64 KiB locked-memory limit: registering its buffers must fail
// with an error explaining how to raise the limit, marked conn.ErrLocal.
func TestMemlock(t *testing.T) {
	ip := rxeIP(t)
	wrapper := []string{"setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock",
		"prlimit", "--memlock=65536:65536", "--"}
	for _, name := range []string{"setpriv", "prlimit"} {
		if _, err := exec.LookPath(name); err != nil {
			testutil.Unmet(t, "%s not found", name)
		}
	}
	check := func(t *testing.T, out *bufio.Reader) {
		res := expectLine(t, out, "result ")
		if !strings.HasPrefix(res, fmt.Sprintf("kind=%d local=true ", conn.KindSetup)) || !strings.Contains(res, "ulimit -l") ||
			!strings.Contains(res, "LimitMEMLOCK") || !strings.Contains(res, "limits.conf") {
			t.Fatalf("child: %s", res)
		}
		t.Logf("child: %s", res)
	}
	t.Run("dial", func(t *testing.T) {
		_, out := child(t, "memlock-dial", net.JoinHostPort(ip, "18898"), wrapper...)
		check(t, out)
	})
	t.Run("accept", func(t *testing.T) {
		_, out := child(t, "memlock-accept", "", wrapper...)
		addr := expectLine(t, out, "listening ")
		c, err := Dialer{Options: DefaultOptions()}.Dial(timeout(t, 10*time.Second), addr, conn.NewParams(1<<20, 4))
		if c != nil {
			defer c.Close()
		}
		if err != nil && (conn.KindOf(err) != conn.KindSetup || !strings.Contains(err.Error(), "could not set up")) {
			t.Fatalf("Dial = %v, want success or a rejection by a receiver that could not set up", err)
		}
		t.Logf("dialer: %v", err)
		check(t, out)
	})
	// A busy receiver refuses before it registers anything: the sender
	// learns that it is busy, not that it could not set up.
	t.Run("busy", func(t *testing.T) {
		_, out := child(t, "memlock-busy", "", wrapper...)
		addr := expectLine(t, out, "listening ")
		_, err := Dialer{Options: DefaultOptions()}.Dial(timeout(t, 10*time.Second), addr, conn.NewParams(1<<20, 4))
		if conn.KindOf(err) != conn.KindBusy {
			t.Fatalf("Dial = %v (kind %v), want kind %v", err, conn.KindOf(err), conn.KindBusy)
		}
		t.Logf("dialer: %v", err)
	})
}

// TestPinned checks that Options.Pinned is what a connection registers:
// a sender's buffers, a receiver's on the RDMA write path with 16 lanes
// (where its notification buffers outweigh the spares the SEND path would
// give whole chunks), and a receiver's on the SEND path.
func TestPinned(t *testing.T) {
	sendOnly := DefaultOptions()
	sendOnly.SendOnly = true
	lanes := DefaultOptions()
	lanes.QPs = maxLanes
	cases := []struct {
		name     string
		p        conn.Params
		listener Options
		dialer   Options
		ring     bool
	}{
		{"4K x 4, 16 lanes", conn.NewParams(4096, 4), DefaultOptions(), lanes, true},
		{"8K x 8, 16 lanes", conn.NewParams(8<<10, 8), DefaultOptions(), lanes, true},
		{"64K x 8, SEND", conn.NewParams(64<<10, 8), sendOnly, DefaultOptions(), false},
		{"1M x 4, SEND", conn.NewParams(1<<20, 4), sendOnly, DefaultOptions(), false},
		{"4M x 8, SEND", conn.NewParams(4<<20, 8), sendOnly, DefaultOptions(), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ring && iwarp() {
				t.Skip("iWARP has no RDMA write path: the SEND cases cover it")
			}
			// Before the connection maps anything: Pinned counts the
			// huge pages the host has free now.
			snd, rcv := tc.dialer.Pinned(tc.p, false), tc.listener.Pinned(tc.p, true)
			l := listenRXE(t, tc.p, tc.listener)
			s, r, err, aerr := dialAccept(timeout(t, 20*time.Second), l, Dialer{Options: tc.dialer}, tc.p)
			if err != nil || aerr != nil {
				t.Fatalf("Dial: %v; Accept: %v", err, aerr)
			}
			t.Cleanup(func() { s.Close(); r.Close() })
			if tc.ring && len(r.(*Conn).lanes.qps) != maxLanes {
				t.Fatalf("the receiver has %d lanes, want %d", len(r.(*Conn).lanes.qps), maxLanes)
			}
			if got := s.Info().Pinned; got != snd {
				t.Errorf("the sender pins %d bytes, Pinned says %d", got, snd)
			}
			if got := r.Info().Pinned; got != rcv {
				t.Errorf("the receiver pins %d bytes, Pinned says %d", got, rcv)
			}
		})
	}
}

// TestPinnedLimit runs each side in a child process without CAP_IPC_LOCK
// under a locked-memory limit of exactly what Options.Pinned says it
// needs, where it must connect, and a page less, where it must fail to
// register: the figure is what the kernel counts against RLIMIT_MEMLOCK.
func TestPinnedLimit(t *testing.T) {
	rxeIP(t)
	for _, name := range []string{"setpriv", "prlimit"} {
		if _, err := exec.LookPath(name); err != nil {
			t.Fatalf("%s not found: the VM's host needs util-linux", name)
		}
	}
	lanes := DefaultOptions()
	lanes.QPs = maxLanes
	if iwarp() {
		lanes.QPs = 0
	}
	limited := func(n int64) []string {
		return []string{"setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock",
			"prlimit", fmt.Sprintf("--memlock=%d:%d", n, n), "--"}
	}
	cases := []struct {
		name     string
		receiver bool
		p        conn.Params
	}{
		{"dial", false, conn.NewParams(1<<20, 4)},
		{"accept", true, conn.NewParams(4096, 4)},
	}
	// The child's listener has the default options: on iWARP it can only
	// take the SEND path.
	figure := DefaultOptions()
	figure.SendOnly = iwarp()
	for _, tc := range cases {
		need := figure.Pinned(tc.p, tc.receiver)
		for _, limit := range []int64{need, need - 4096} {
			t.Run(fmt.Sprintf("%s under %d", tc.name, limit), func(t *testing.T) {
				t.Setenv("RDMA_TEST_PARAMS", fmt.Sprintf("%d x %d", tc.p.Chunk, tc.p.Depth))
				var out *bufio.Reader
				if tc.receiver {
					_, out = child(t, "pinned-accept", "", limited(limit)...)
					addr := expectLine(t, out, "listening ")
					c, err := Dialer{Options: lanes}.Dial(timeout(t, 20*time.Second), addr, tc.p)
					if c != nil {
						defer c.Close()
					}
					t.Logf("dialer: %v", err)
				} else {
					l := listenRXE(t, tc.p, DefaultOptions())
					accepted := make(chan conn.Conn, 1)
					go func() {
						c, _ := l.Accept(context.Background())
						accepted <- c
					}()
					defer func() {
						l.Close()
						if c := <-accepted; c != nil {
							c.Close()
						}
					}()
					_, out = child(t, "pinned-dial", l.Addr(), limited(limit)...)
				}
				res := expectLine(t, out, "result ")
				t.Logf("child: %s", res)
				switch {
				case limit == need && res != fmt.Sprintf("pinned %d", need):
					t.Errorf("under a limit of what Pinned says (%d bytes): %s", need, res)
				case limit < need && !strings.HasPrefix(res, fmt.Sprintf("kind=%d local=true ", conn.KindSetup)):
					t.Errorf("under a page less than Pinned says (%d bytes): %s; want a failure to register", need, res)
				}
			})
		}
	}
}

// BenchmarkThroughput streams 256 MiB in 1 MiB messages with depth 4
// between two Conns in this process. Compare with
// `ib_send_bw -R -d rxe0 -s 1048576` in the same VM run.
func BenchmarkThroughput(b *testing.B) {
	const total = 256 << 20
	for _, busy := range []bool{false, true} {
		b.Run(fmt.Sprintf("busypoll=%v", busy), func(b *testing.B) {
			opt := DefaultOptions()
			opt.BusyPoll = busy
			p := conn.NewParams(1<<20, 4)
			snd, rcv := pair(b, p, p, opt)
			msg := len(snd.SendBuf(0))
			count := total / msg
			b.SetBytes(int64(count * msg))
			b.ResetTimer()
			for range b.N {
				stream(b, snd, rcv, count, func(int) int { return msg })
			}
			b.ReportMetric(float64(count*msg)*float64(b.N)/b.Elapsed().Seconds()/(1<<20), "MiB/s")
		})
	}
}
