package memconn

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// closeTimeout bounds how long Close waits for queued messages to arrive.
const closeTimeout = 2 * time.Second

// holding says what a receive buffer holds, for the peer's in-flight count.
type holding uint8

const (
	holdsNothing holding = iota
	holdsControl
	holdsData
)

// Conn is one end of an in-memory pair. It implements conn.Conn.
type Conn struct {
	mu     *sync.Mutex // the pair's; guards the fields below peer
	peer   *Conn
	name   string
	info   conn.Info
	faults Faults

	sendBufs, recvBufs [][]byte
	wake               chan struct{} // Poll may have something to return
	kick               chan struct{} // deliverLoop may have something to do
	delivered          chan struct{} // closed when deliverLoop has returned

	out                    []message // sent, not yet delivered
	posted                 []int     // posted receive buffers, oldest first
	spareFrom              int       // receive buffers from this index on take control messages only (MaxControl bytes); the others data only
	dataSize               int       // the size of a data receive buffer, allocated by OpenWindow
	recvBusy, sendBusy     []bool    // posted and not yet reported by Poll
	holds                  []holding
	dataOrder              []int // receive buffers holding data, in arrival order
	comps                  []conn.Completion
	err                    error // why the connection failed
	closed                 bool
	inFlight, dataInFlight int
	stats                  Stats
	adopted                conn.Conn         // whose receive buffers PostForward sends from
	lender                 *Conn             // adopted, when it is a memconn end
	lent                   []atomic.Bool     // per receive buffer: an adopting end sends from it, not yet reported done
	heldFwd                []conn.Completion // a PostForward completion held back (Faults.ReorderForwards)
}

// message is one message on its way: send buffer buf, or ctrl if buf < 0.
type message struct {
	seq  int
	buf  int
	n    int
	ctrl []byte
	from []byte // PostForward: the adopted receive buffer, read when delivered
	due  time.Time
}

// newConn makes an end called name, guarded by mu, with buffers for layout
// l and every receive buffer posted, that reports negotiated p and injects
// f into the messages it sends.
func newConn(mu *sync.Mutex, name string, l conn.Layout, p conn.Params, f Faults) *Conn {
	c := &Conn{
		mu:        mu,
		name:      name,
		info:      conn.Info{Transport: "mem", Local: name, Chunk: p.Chunk, Depth: p.Depth},
		faults:    f,
		sendBufs:  make([][]byte, l.SendBufs),
		recvBufs:  make([][]byte, l.RecvBufs),
		wake:      make(chan struct{}, 1),
		kick:      make(chan struct{}, 1),
		delivered: make(chan struct{}),
		recvBusy:  make([]bool, l.RecvBufs),
		sendBusy:  make([]bool, l.SendBufs),
		holds:     make([]holding, l.RecvBufs),
		lent:      make([]atomic.Bool, l.RecvBufs),
		spareFrom: l.RecvBufs - conn.SpareRecvs,
	}
	if l.SendBufs > 0 {
		c.spareFrom = 0 // a sender receives control messages only
	}
	c.dataSize = l.RecvSize
	for i := range c.sendBufs {
		c.sendBufs[i] = make([]byte, l.SendSize)
	}
	for i := c.spareFrom; i < len(c.recvBufs); i++ {
		c.recvBufs[i] = make([]byte, min(l.RecvSize, conn.MaxControl))
		c.recvBusy[i] = true
		c.posted = append(c.posted, i)
	}
	return c
}

// OpenWindow allocates a receiver end's data receive buffers and posts
// them; until then a data message fails the pair. Only the first call
// does anything.
func (c *Conn) OpenWindow() ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return nil, err
	}
	for i := range c.spareFrom {
		if c.recvBufs[i] != nil {
			break
		}
		c.recvBufs[i] = make([]byte, c.dataSize)
		c.recvBusy[i] = true
		c.posted = append(c.posted, i)
	}
	return nil, nil
}

// SendBuf returns send buffer i.
func (c *Conn) SendBuf(i int) []byte { return c.sendBufs[i] }

// RecvBuf returns receive buffer i.
func (c *Conn) RecvBuf(i int) []byte { return c.recvBufs[i] }

// SendBufs returns how many send buffers the end has.
func (c *Conn) SendBufs() int { return len(c.sendBufs) }

// RecvBufs returns how many receive buffers the end has.
func (c *Conn) RecvBufs() int { return len(c.recvBufs) }

// Info describes the end; its Transport is "mem".
func (c *Conn) Info() conn.Info { return c.info }

// Stats returns what happened at this end so far.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Close waits up to two seconds for queued messages to arrive, then closes
// the end: a pending Poll returns conn.ErrClosed, and the peer's Poll
// returns an error once it has returned what had arrived.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	signal(c.wake)
	signal(c.kick)
	c.mu.Unlock()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-c.delivered:
	case <-t.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail(conn.ErrClosed)
	c.peer.fail(&conn.Error{Kind: conn.KindAborted, Op: "receive from " + c.name, Err: errors.New("peer closed the connection")})
	return nil
}

// signal wakes whoever waits on ch, if nobody has yet.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
