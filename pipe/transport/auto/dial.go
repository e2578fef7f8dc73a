// Package auto is the transport of --transport auto: a dialer that tries
// RDMA first, for a bounded time, and falls back to TCP, and a listener
// that accepts on RDMA and TCP at once on the same port.
package auto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
	"github.com/rdmapipe/rdmapipe/pipe/transport/tcp"
)

// DefaultRDMATimeout bounds the wait for the answer to an RDMA connect
// request when the Dialer sets no RDMATimeout. rdma_cm answers a refused or
// rejected connect at once; a peer host without RDMA does not answer at
// all, and rdma_cm would retry for far longer than a user waits before TCP
// is tried.
const DefaultRDMATimeout = 3 * time.Second

// Dialer connects over RDMA when a device can reach the receiver and the
// receiver answers on RDMA, else over TCP. It implements conn.Dialer.
type Dialer struct {
	RDMA rdma.Options
	TCP  tcp.Dialer
	// RDMATimeout bounds the wait for the answer to each RDMA connect
	// request, from when it is sent (this host's own set-up does not
	// count); TCP is tried next. 0 means DefaultRDMATimeout.
	RDMATimeout time.Duration
	// Notice, if set, is told once (the first time) that TCP is used and
	// why RDMA was not.
	Notice io.Writer
	// Name prefixes the notice, e.g. "rdmasend".
	Name string

	once sync.Once
}

// Dial connects to addr with proposal. A wrong key ends it without trying
// TCP; a busy answer on RDMA does not, since it may come from RDMA's
// set-up slots alone (a receiver busy with a stream answers busy on TCP
// too).
func (d *Dialer) Dial(ctx context.Context, addr string, proposal conn.Params) (conn.Conn, error) {
	err := rdma.Available()
	if err == nil {
		timeout := d.RDMATimeout
		if timeout <= 0 {
			timeout = DefaultRDMATimeout
		}
		var c conn.Conn
		c, err = rdma.Dialer{Options: d.RDMA, AnswerTimeout: timeout}.Dial(ctx, addr, proposal)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if conn.KindOf(err) == conn.KindAuth {
			return nil, err
		}
		if errors.Is(err, rdma.ErrNoAnswer) {
			err = fmt.Errorf("no RDMA answer within %v", timeout)
		}
	}
	d.once.Do(func() {
		switch {
		case d.Notice == nil:
		case conn.KindOf(err) == conn.KindBusy:
			fmt.Fprintf(d.Notice, "%s: RDMA busy at %s (%v); trying TCP\n", d.Name, addr, err)
		default:
			fmt.Fprintf(d.Notice, "%s: no RDMA path to %s (%v); using TCP\n", d.Name, addr, err)
		}
	})
	return d.TCP.Dial(ctx, addr, proposal)
}

var _ conn.Dialer = (*Dialer)(nil)
