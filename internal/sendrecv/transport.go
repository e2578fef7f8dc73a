package sendrecv

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/auto"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
	"github.com/rdmapipe/rdmapipe/pipe/transport/tcp"
)

// rdmaOpts converts the RDMA flags to the transport's options.
func (o options) rdmaOpts() rdma.Options {
	return rdma.Options{Device: o.rdma.device, IBPort: o.rdma.ibPort, GIDIndex: o.rdma.gidIndex, BusyPoll: o.rdma.busyPoll, SendOnly: o.rdma.sendOnly, QPs: o.rdma.qps}
}

// newDialer returns the dialer for the transport the options ask for. In
// auto mode it tries RDMA first and falls back to TCP, saying so once on
// notice with -v, prefixed with name.
func newDialer(o options, notice io.Writer, name string) conn.Dialer {
	t := tcp.Dialer{HandshakeTimeout: o.send.HandshakeTimeout}
	switch o.transport {
	case "tcp":
		return t
	case "rdma":
		return rdmaDialer{rdma.Dialer{Options: o.rdmaOpts()}}
	}
	return &auto.Dialer{RDMA: o.rdmaOpts(), TCP: t, Notice: o.notices(notice), Name: name}
}

// rdmaDialer is the rdma transport's dialer, failing with kind
// conn.KindNoRDMA on a host without RDMA.
type rdmaDialer struct{ rdma.Dialer }

func (d rdmaDialer) Dial(ctx context.Context, addr string, proposal conn.Params) (conn.Conn, error) {
	if err := rdma.Available(); err != nil {
		return nil, err
	}
	return d.Dialer.Dial(ctx, addr, proposal)
}

// listen starts listening on bind with the transport the options ask for.
// In auto mode it listens on RDMA (when a device is present) and TCP at
// once, and says on notice with -v when it listens on only one of them.
func listen(ctx context.Context, o options, bind string, notice io.Writer, name string) (conn.Listener, error) {
	addr := net.JoinHostPort(strings.Trim(bind, "[]"), strconv.Itoa(o.port))
	switch o.transport {
	case "tcp":
		return asListener(tcp.Listen(ctx, addr, o.params))
	case "rdma":
		if err := rdma.Available(); err != nil {
			return nil, err
		}
		return asListener(rdma.Listen(ctx, addr, o.params, o.rdmaOpts()))
	}
	return auto.Listen(ctx, addr, o.params, o.rdmaOpts(), o.notices(notice), name)
}

// notices returns where auto mode's notices of the transport it chose go:
// w with -v, else nowhere, since a stream that works says nothing (as nc
// and scp do); --transport rdma that cannot be had is an error, not a
// notice.
func (o options) notices(w io.Writer) io.Writer {
	if o.verbose {
		return w
	}
	return io.Discard
}

// asListener returns l as a conn.Listener, or a nil one (not an interface
// holding a nil pointer) on error.
func asListener[L conn.Listener](l L, err error) (conn.Listener, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

// receiverAddr is the address of a HOST[:PORT] the user gave (as an
// argument, in --to, --to-file or --forward), with port if it has none:
// a usage error if it names no host or a port that is not 1 to 65535.
func receiverAddr(arg string, port int) (string, error) {
	addr := hostPort(arg, port)
	host, p, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "", command.Usagef("%q: not a HOST[:PORT]", arg)
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return "", command.Usagef("%q: the port must be a number from 1 to 65535", arg)
	}
	return addr, nil
}

// hostPort adds the default port to a HOST argument that has none. An
// IPv6 address may come bare (::1) or in brackets ([::1]).
func hostPort(arg string, port int) string {
	if _, _, err := net.SplitHostPort(arg); err == nil {
		return arg
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(arg, "["), "]"), strconv.Itoa(port))
}
