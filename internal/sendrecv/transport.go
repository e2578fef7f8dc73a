package sendrecv

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
)

// rdmaOpts converts the RDMA flags to the transport's options.
func (o options) rdmaOpts() rdma.Options {
	return rdma.Options{Device: o.rdma.device, IBPort: o.rdma.ibPort, GIDIndex: o.rdma.gidIndex, BusyPoll: o.rdma.busyPoll, SendOnly: o.rdma.sendOnly, QPs: o.rdma.qps}
}

// transportOf is the transport the options ask for; auto mode says on
// notice, with -v, when it takes one transport only, prefixed with name.
func (o options) transportOf(notice io.Writer, name string) transport.Config {
	return transport.Config{Name: o.transport, RDMA: o.rdmaOpts(), HandshakeTimeout: o.send.HandshakeTimeout, Notice: o.notices(notice), Who: name}
}

// newDialer returns the dialer for the transport the options ask for (see
// transportOf).
func newDialer(o options, notice io.Writer, name string) conn.Dialer {
	return o.transportOf(notice, name).Dialer()
}

// listen starts listening on bind with the transport the options ask for
// (see transportOf).
func listen(ctx context.Context, o options, bind string, notice io.Writer, name string) (conn.Listener, error) {
	addr := net.JoinHostPort(strings.Trim(bind, "[]"), strconv.Itoa(o.port))
	return o.transportOf(notice, name).Listen(ctx, addr, o.params)
}

// notices returns w where -v asks for transport notices, else nowhere.
func (o options) notices(w io.Writer) io.Writer {
	if o.verbose {
		return w
	}
	return io.Discard
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
