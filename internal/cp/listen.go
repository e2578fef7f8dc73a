package cp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
)

// listenAttempts is how often an auto listener tries another port when
// the one the kernel offered for TCP is taken on RDMA or TCP meanwhile.
const listenAttempts = 5

// listenHost returns the address the remote side listens on and why: the
// one the request names (the local side's --data-host, resolved), else the
// address the ssh connection arrived on, the third field of sshConnection
// (SSH_CONNECTION: client address and port, server address and port),
// else "", every address.
func listenHost(req Request, sshConnection string) (host, why string) {
	if req.Listen != "" {
		return req.Listen, "the address of --data-host"
	}
	fields := strings.Fields(sshConnection)
	if len(fields) != 4 {
		return "", fmt.Sprintf("every address: SSH_CONNECTION %.100q names no address of the ssh connection", sshConnection)
	}
	if _, err := netip.ParseAddr(fields[2]); err != nil {
		return "", fmt.Sprintf("every address: SSH_CONNECTION's server address %.64q: %v", fields[2], err)
	}
	return fields[2], "the address the ssh connection arrived on"
}

// portRange is the ports a listener may take (--data-ports), Lo to Hi;
// zero: any of the system's choice.
type portRange struct{ Lo, Hi int }

// parsePorts parses a port range, LO-HI or one port.
func parsePorts(s string) (portRange, error) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		hi = lo
	}
	l, err1 := strconv.Atoi(lo)
	h, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || l < 1 || h > 65535 || l > h {
		return portRange{}, fmt.Errorf("ports %.32q: want LO-HI (or one port), 1 <= LO <= HI <= 65535", s)
	}
	return portRange{l, h}, nil
}

// String is r as parsePorts takes it.
func (r portRange) String() string {
	if r == (portRange{}) {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// listenAnyPort listens on host (every address if host is empty) with
// transport ("auto": RDMA and TCP on the same port) on the first free port
// of ports, or one of the system's choice if ports is zero, and returns
// the listener and its port. notice is told when auto mode listens on TCP
// only.
func listenAnyPort(ctx context.Context, transport, host string, ports portRange, p conn.Params, notice io.Writer) (conn.Listener, int, error) {
	if ports != (portRange{}) {
		return listenInRange(ctx, transport, host, ports, p, notice)
	}
	if transport != "auto" {
		l, err := listenPort(ctx, transport, host, 0, p, notice)
		if err != nil {
			return nil, 0, err
		}
		return portOf(l)
	}
	var err error
	for range listenAttempts {
		var port int
		if port, err = freeTCPPort(host); err != nil {
			return nil, 0, conn.Errorf(conn.KindSetup, "listen", "find a free port: %v", err)
		}
		var l conn.Listener
		if l, err = listenPort(ctx, transport, host, port, p, notice); err == nil {
			return l, port, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, 0, err
}

// listenInRange listens as listenAnyPort does on the first port of ports
// that is free, trying each in turn.
func listenInRange(ctx context.Context, transport, host string, ports portRange, p conn.Params, notice io.Writer) (conn.Listener, int, error) {
	for port := ports.Lo; port <= ports.Hi; port++ {
		l, err := listenPort(ctx, transport, host, port, p, notice)
		if err == nil {
			return l, port, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, 0, err
		}
	}
	where := host
	if where == "" {
		where = "every address"
	}
	return nil, 0, conn.Errorf(conn.KindSetup, "listen on "+where, "no free port in %v (--data-ports): every one is in use", ports)
}

// listenPort listens on host:port (port 0: one of the system's choice)
// with transport.
func listenPort(ctx context.Context, transport, host string, port int, p conn.Params, notice io.Writer) (conn.Listener, error) {
	return transportOf(transport, notice).Listen(ctx, net.JoinHostPort(host, strconv.Itoa(port)), p)
}

// transportOf is the transport called name with rdmacp's options; auto
// mode tells notice when it takes one transport only.
func transportOf(name string, notice io.Writer) transport.Config {
	return transport.Config{Name: name, RDMA: rdma.DefaultOptions(), Notice: notice, Who: "rdmacp"}
}

// freeTCPPort returns a TCP port on host that was free a moment ago: auto
// mode listens on RDMA first, then on TCP with the same port number.
func freeTCPPort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portOf returns l and the port it listens on.
func portOf(l conn.Listener) (conn.Listener, int, error) {
	_, p, err := net.SplitHostPort(l.Addr())
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil {
		l.Close()
		return nil, 0, conn.Errorf(conn.KindInternal, "listen", "cannot read the port of %q", l.Addr())
	}
	return l, port, nil
}

// notices returns where the remote side's transport notices go: its
// stderr (which ssh carries to the user) when verbose, else nowhere.
func notices(verbose bool, stderr io.Writer) io.Writer {
	if verbose {
		return stderr
	}
	return io.Discard
}
