package pipe

import (
	"context"
	"io"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// SendConfig configures Send, and Probe (which uses its Key, Encrypt and
// HandshakeTimeout).
type SendConfig struct {
	// Key is the secret the receiver must hold too; empty means none.
	Key []byte
	// Encrypt encrypts the stream's data with a subkey of the handshake
	// (AES-256-GCM); it needs a Key.
	Encrypt bool
	// Timeout is how long the receiver may stay silent before the stream
	// is given up; 0 means wait forever. Heartbeats keep a live but idle
	// stream from reaching it.
	Timeout time.Duration
	// HandshakeTimeout bounds the handshake after the transport connected;
	// 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Progress, if set, is called with the byte count so far after each
	// chunk.
	Progress func(bytes int64)
	// Gauges, if set, is kept up to date while the stream runs.
	Gauges *Gauges
	// Chain lists the receivers after the one Send connects to: each
	// relays the stream to the next, and Send succeeds only when every one
	// of them wrote every byte.
	Chain []string
	// Repair gives up a receiver that fails mid-stream and goes on with the
	// first of Fallback (by default the Chain, whose relays then repair it
	// too) that takes the stream over, naming those given up in
	// Stats.Lost; it needs a Key, and Dial.
	Repair bool
	// Fallback lists the receivers that may take over, in chain order; a
	// Fallback implies Repair.
	Fallback []Hop
	// Dial connects to a fallback, for Repair.
	Dial func(ctx context.Context, addr string) (conn.Conn, error)
	// HostsEvery, with a Key, asks the chain this often how far behind
	// each host is (Gauges.Hosts, Stats.Hosts); 0 asks never. The answer
	// is shown only: nothing is decided on it.
	HostsEvery time.Duration
}

// ReceiveConfig configures Receive.
type ReceiveConfig struct {
	// Key is the secret the sender must hold too; empty means none.
	Key []byte
	// Encrypt refuses a sender that does not encrypt. A receiver with a
	// Key decrypts whatever its sender encrypts.
	Encrypt bool
	// Timeout is how long the sender may stay silent before the stream is
	// given up; 0 means wait forever.
	Timeout time.Duration
	// HandshakeTimeout bounds the handshake after the transport connected;
	// 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Progress, if set, is called with the byte count so far after each
	// chunk.
	Progress func(bytes int64)
	// Gauges, if set, is kept up to date while the stream runs.
	Gauges *Gauges
	// Sparse writes the blocks of zeros of a regular-file output as holes
	// and sets the file's length at the end (see SparseOutput).
	Sparse bool
	// Sync, if set, is called once the whole stream is written and
	// verified, before it is confirmed to the sender; an error fails it.
	Sync func() error
	// Output, if set, is called once the sender is welcomed, before the
	// first byte: the stream is written to the writer it returns.
	Output func() (io.Writer, error)
	// Claim, if set, is called once the sender is authenticated, before its
	// welcome: false refuses it as busy.
	Claim func() bool
	// Unclaim, if set, is called when a claimed stream fails before its
	// welcome because the relay could not be set up.
	Unclaim func()
	// Rejoin, if set, gives the connections from which a sender may take
	// the stream over when its sender is lost mid-stream; it needs a Key.
	// Receive closes the connections it returns.
	Rejoin func(ctx context.Context) (conn.Conn, error)
	// Relay says where and how this receiver relays the stream on.
	Relay RelayConfig
	// Lag lets the output of a receiver in a chain fall behind the stream.
	Lag LagConfig
}

// LagConfig lets a receiver in a chain (one that relays, or one a relay
// sends to) keep what its output, a pipe or any writer but a regular file,
// has not taken yet, so that a slow output holds back neither the hosts
// after it nor those before it: in memory up to Memory (768 KiB at
// least), then in a spill file up to Spill. When both are full, a receiver
// whose sender said it repairs the chain past it (wire.FlagRepair: every
// receiver of a keyed rdmasend --to two hosts or more) fails its stream
// (KindAborted: the chain goes on without it); any other waits for its
// output. Memory 0: the output sets the chain's pace.
type LagConfig struct {
	Memory int64
	Spill  int64
	Dir    string // the spill file's directory; "": a private one in os.TempDir
}

// RelayConfig configures how a receiver relays its stream to a next
// receiver: the one in To, or the first of the chain its sender names.
type RelayConfig struct {
	// To is a next receiver to relay to always (before any chain the
	// sender names).
	To string
	// Key is the key the receiver at To holds, when it is not the
	// receiver's own.
	Key []byte
	// Allow, if set, lets a sender name a chain: it is given the chain's
	// first receiver and returns the address to Dial, or why not.
	Allow func(ctx context.Context, next string) (string, error)
	// Dial connects to the next receiver (and to fallbacks).
	Dial func(ctx context.Context, addr string) (conn.Conn, error)
	// Repair, with To, gives up a next receiver that fails mid-stream and
	// goes on with the first of Fallback that takes the stream over.
	Repair bool
	// Fallback lists the receivers after To, in chain order; a Fallback
	// implies Repair.
	Fallback []Hop
}

// Hop is a receiver further down a chain (see SendConfig.Fallback).
type Hop struct {
	Addr string // where Dial connects to, and its name in Stats.Lost
	Key  []byte // the key it holds; nil: the configuration's Key
}

// DefaultHandshakeTimeout is the handshake bound when a configuration
// sets none.
const DefaultHandshakeTimeout = 10 * time.Second

// timeouts are a session's bounds, defaults resolved.
type timeouts struct {
	silence   time.Duration // the peer's longest silence; 0: none
	handshake time.Duration
}

func newTimeouts(silence, handshake time.Duration) timeouts {
	if handshake <= 0 {
		handshake = DefaultHandshakeTimeout
	}
	return timeouts{silence: silence, handshake: handshake}
}

// streamConfig is what a sender or a receiver uses of its configuration
// while it streams.
type streamConfig struct {
	key      []byte
	encrypt  bool
	progress func(bytes int64)
	gauges   *Gauges
	view     *chainView // asks the chain for host reports; nil: none
}

// repairConfig is what a link uses to repair a stream (see link).
type repairConfig struct {
	key      []byte // for the fallbacks whose Hop has none
	timeouts timeouts
	hops     []Hop
	dial     func(ctx context.Context, addr string) (conn.Conn, error)
}

func (cfg SendConfig) timeouts() timeouts { return newTimeouts(cfg.Timeout, cfg.HandshakeTimeout) }

func (cfg SendConfig) stream() streamConfig {
	return streamConfig{key: cfg.Key, encrypt: cfg.Encrypt, progress: cfg.Progress, gauges: cfg.Gauges}
}

// repairs says whether the stream is to be repaired.
func (cfg SendConfig) repairs() bool { return cfg.Repair || len(cfg.Fallback) > 0 }

// checkRepair checks what repairing the stream needs.
func (cfg SendConfig) checkRepair() error {
	switch {
	case !cfg.repairs():
		return nil
	case len(cfg.Key) == 0:
		return repairKeyError()
	case cfg.Dial == nil && (len(cfg.Fallback) > 0 || len(cfg.Chain) > 0):
		return repairDialError()
	}
	return nil
}

func (cfg ReceiveConfig) timeouts() timeouts { return newTimeouts(cfg.Timeout, cfg.HandshakeTimeout) }

// check checks what the receiver's rejoins and repairs need.
func (cfg ReceiveConfig) check() error {
	switch {
	case cfg.Rejoin != nil && len(cfg.Key) == 0:
		return conn.Errorf(conn.KindUsage, "rejoin", "taking a stream over from another sender needs a shared key: without one, its senders cannot be told apart")
	case !cfg.Relay.repairs():
		return nil
	case len(cfg.Key) == 0:
		return repairKeyError()
	case cfg.Relay.Dial == nil && len(cfg.Relay.Fallback) > 0:
		return repairDialError()
	}
	return nil
}

// repairs says whether the stream to To is to be repaired.
func (rc RelayConfig) repairs() bool { return rc.Repair || len(rc.Fallback) > 0 }

// repairKeyError and repairDialError are a repair's usage errors.
func repairKeyError() error {
	return conn.Errorf(conn.KindUsage, "repair", "repairing a chain needs a shared key: without one, what a receiver wrote from a dead upstream cannot be trusted")
}

func repairDialError() error {
	return conn.Errorf(conn.KindUsage, "repair", "fallback receivers need a way to connect to them (Dial)")
}

// chainHops returns the receivers of a chain as hops, each with the
// configuration's key.
func chainHops(chain []string) []Hop {
	var hops []Hop
	for _, h := range chain {
		hops = append(hops, Hop{Addr: h})
	}
	return hops
}
