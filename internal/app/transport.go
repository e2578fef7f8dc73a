package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
	"github.com/rdmapipe/rdmapipe/pipe/transport/tcp"
)

// rdmaOpts converts the RDMA flags to the transport's options.
func (o options) rdmaOpts() rdma.Options {
	return rdma.Options{Device: o.rdma.device, IBPort: o.rdma.ibPort, GIDIndex: o.rdma.gidIndex, BusyPoll: o.rdma.busyPoll}
}

// dialer connects a sender with the transport the options ask for. In auto
// mode it tries RDMA first and falls back to TCP, saying so once on notice.
type dialer struct {
	o       options
	notice  io.Writer
	name    string
	noticed bool
}

// dial makes one attempt to connect to addr.
func (d *dialer) dial(ctx context.Context, addr string) (pipe.Conn, error) {
	switch d.o.transport {
	case "tcp":
		return tcp.Dialer{}.Dial(ctx, addr, d.o.params)
	case "rdma":
		if err := rdma.Available(); err != nil {
			return nil, err
		}
		return rdma.Dialer{Options: d.o.rdmaOpts()}.Dial(ctx, addr, d.o.params)
	}
	err := rdma.Available()
	if err == nil {
		var c pipe.Conn
		if c, err = (rdma.Dialer{Options: d.o.rdmaOpts()}).Dial(ctx, addr, d.o.params); err == nil {
			return c, nil
		}
		if k := pipe.KindOf(err); k == pipe.KindAuth || k == pipe.KindBusy {
			return nil, err
		}
	}
	if !d.noticed {
		fmt.Fprintf(d.notice, "%s: no RDMA path to %s (%v); using TCP\n", d.name, addr, err)
		d.noticed = true
	}
	return tcp.Dialer{}.Dial(ctx, addr, d.o.params)
}

// listen starts listening on bind with the transport the options ask for.
// In auto mode it listens on RDMA (when a device is present) and TCP at once.
func listen(ctx context.Context, o options, bind string, notice io.Writer, name string) (pipe.Listener, error) {
	addr := net.JoinHostPort(bind, strconv.Itoa(o.port))
	switch o.transport {
	case "tcp":
		return asListener(tcp.Listen(ctx, addr, o.params))
	case "rdma":
		if err := rdma.Available(); err != nil {
			return nil, err
		}
		return asListener(rdma.Listen(ctx, addr, o.params, o.rdmaOpts()))
	}
	// RDMA first: once TCP accepts, RDMA is up too, so a sender in auto mode
	// that retries never settles for TCP while RDMA is still starting.
	var rl *rdma.Listener
	err := rdma.Available()
	if err == nil {
		rl, err = rdma.Listen(ctx, addr, o.params, o.rdmaOpts())
	}
	tl, terr := tcp.Listen(ctx, addr, o.params)
	if terr != nil {
		if rl != nil {
			rl.Close()
		}
		return nil, terr
	}
	if err != nil {
		fmt.Fprintf(notice, "%s: not listening on RDMA (%v); TCP only\n", name, err)
		return tl, nil
	}
	return newMultiListener([]pipe.Listener{rl, tl}, []string{"rdma", "tcp"}), nil
}

// asListener returns l as a pipe.Listener, or a nil one (not an interface
// holding a nil pointer) on error.
func asListener[L pipe.Listener](l L, err error) (pipe.Listener, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

// hostPort adds the default port to a HOST argument that has none.
func hostPort(arg string, port int) string {
	if _, _, err := net.SplitHostPort(arg); err == nil {
		return arg
	}
	return net.JoinHostPort(arg, strconv.Itoa(port))
}
