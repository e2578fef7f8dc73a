package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
	"github.com/rdmapipe/rdmapipe/pipe/transport/tcp"
)

// rdmaAttempt bounds the RDMA route resolution and connect, as auto's
// dialer does: a peer host without RDMA never answers.
const rdmaAttempt = 5 * time.Second

// hugePagesDir is where the kernel keeps the 2 MiB huge page pool, the
// page size the RDMA transport asks for.
const hugePagesDir = "/sys/kernel/mm/hugepages/hugepages-2048kB"

// Config says what to check.
type Config struct {
	Command   string // the command line shown in the report's title
	Peer      string // "host:port" of the receiver (rdmasend --check); empty checks listening
	Listen    string // "host:port" to listen on (rdmarecv --check)
	Transport string // "auto", "rdma" or "tcp": what a stream would be allowed to use
	RDMA      rdma.Options
	Params    conn.Params // the window this side would propose
	Key       []byte
	// HandshakeTimeout bounds each handshake after its connect.
	HandshakeTimeout time.Duration
	Memory           Memory
}

// Memory is this process's locked-memory situation and what the default
// window needs, worked out by the caller (which owns the window rules).
type Memory struct {
	Soft, Hard uint64 // RLIMIT_MEMLOCK in bytes (math.MaxUint64: unlimited)
	Unlimited  bool   // Hard is unlimited
	CapIPCLock bool   // the process may lock memory beyond the limit
	Window     string // the default window here, e.g. "1 MiB x 6"
	Locks      int64  // bytes this side registers at most with Window
	FullWindow string // the window used where memory is not limited
	FullLocks  int64  // bytes that window registers on this side
	// HugePages and FullHugePages are the 2 MiB huge pages the buffers
	// of Window and of FullWindow take on this side when the host has them.
	HugePages, FullHugePages int64
	TooLittle                bool // the limit is below what the smallest window needs
}

// Facts are what Gather found.
type Facts struct {
	Config
	RDMAErr           error // rdma.Available: nil if a device opens and rdma_cm is there
	Devices           []rdma.Device
	DevicesErr        error
	HugePages         HugePages
	Pace              Pace
	Route             *Result[rdma.Route] // rdmasend: rdma_cm's resolution of the peer
	RDMAPath, TCPPath *Result[Probe]      // rdmasend: handshakes; rdmarecv: listening
}

// HugePages is the 2 MiB huge page pool.
type HugePages struct {
	Total, Free int64
	Err         error
}

// Result is the outcome of one step: a value or why it failed.
type Result[T any] struct {
	Value T
	Err   error
}

// Probe is a handshake with the receiver (or, for a receiver, a listener
// that opened).
type Probe struct {
	Info     conn.Info
	Elapsed  time.Duration
	GIDIndex int // the GID index the RDMA queue pair sends from; -1 if none or unknown
	GIDErr   error
	Addr     string // the listening address (rdmarecv)
}

// Gather collects the facts for cfg. It connects to the receiver (and
// completes the handshake without sending data) or opens and closes the
// listeners; ctx bounds it all.
func Gather(ctx context.Context, cfg Config) Facts {
	f := Facts{Config: cfg}
	f.RDMAErr = rdma.Available()
	f.Devices, f.DevicesErr = rdma.Devices()
	f.HugePages = readHugePages(hugePagesDir)
	f.Pace = measurePace()
	if cfg.Peer == "" {
		f.RDMAPath, f.TCPPath = f.listen(ctx)
		return f
	}
	if f.RDMAErr == nil {
		rctx, cancel := context.WithTimeout(ctx, rdmaAttempt)
		r, err := rdma.ResolveRoute(rctx, cfg.Peer, cfg.RDMA)
		cancel()
		f.Route = &Result[rdma.Route]{r, err}
		if err == nil {
			opt := cfg.RDMA
			opt.QPs = 1
			f.RDMAPath = f.probe(ctx, rdma.Dialer{Options: opt}, rdmaAttempt)
		}
	}
	f.TCPPath = f.probe(ctx, tcp.Dialer{HandshakeTimeout: cfg.HandshakeTimeout}, rdmaAttempt+cfg.HandshakeTimeout)
	return f
}

// probe connects with d and completes a handshake without data.
func (f Facts) probe(ctx context.Context, d conn.Dialer, limit time.Duration) *Result[Probe] {
	ctx, cancel := context.WithTimeout(ctx, limit+f.HandshakeTimeout)
	defer cancel()
	start := time.Now()
	c, err := d.Dial(ctx, f.Peer, f.Params)
	if err != nil {
		return &Result[Probe]{Err: err}
	}
	defer c.Close()
	info, err := pipe.Probe(ctx, c, pipe.SendConfig{Key: f.Key, HandshakeTimeout: f.HandshakeTimeout})
	p := Probe{Info: info, Elapsed: time.Since(start), GIDIndex: -1}
	if rc, ok := c.(*rdma.Conn); ok && err == nil {
		p.GIDIndex, p.GIDErr = rc.SourceGIDIndex()
	}
	return &Result[Probe]{p, err}
}

// listen opens and closes a listener on each transport.
func (f Facts) listen(ctx context.Context) (rdmaRes, tcpRes *Result[Probe]) {
	if f.RDMAErr == nil {
		l, err := rdma.Listen(ctx, f.Listen, f.Params, f.RDMA)
		rdmaRes = &Result[Probe]{Err: err}
		if err == nil {
			rdmaRes.Value.Addr = l.Addr()
			l.Close()
		}
	}
	l, err := tcp.Listen(ctx, f.Listen, f.Params)
	tcpRes = &Result[Probe]{Err: err}
	if err == nil {
		tcpRes.Value.Addr = l.Addr()
		l.Close()
	}
	return rdmaRes, tcpRes
}

// readHugePages reads the huge page pool's counters in dir.
func readHugePages(dir string) HugePages {
	var h HugePages
	read := func(name string) int64 {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			h.Err = err
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			h.Err = err
		}
		return n
	}
	h.Total, h.Free = read("nr_hugepages"), read("free_hugepages")
	return h
}
