package pipe

import (
	"slices"
	"sync/atomic"
)

// Gauges are a stream's live counters, for reports while it runs (such as
// rdmasend --stats-interval). Send and Receive update the Gauges given in
// their configuration; any goroutine may read them. A nil *Gauges reads as zero.
type Gauges struct {
	bytes    atomic.Int64
	inFlight atomic.Int64
	stalls   atomic.Int64
	lag      atomic.Int64
	hosts    atomic.Pointer[[]HostLag]
	refused  atomic.Int64
}

// Bytes is the payload read (sender) or written (receiver) so far.
func (g *Gauges) Bytes() int64 {
	if g == nil {
		return 0
	}
	return g.bytes.Load()
}

// InFlight is, on the sender, how many of the receiver's credits are in
// use (messages posted and not yet written by the receiver); on the
// receiver, how many arrived messages wait for the writer.
func (g *Gauges) InFlight() int64 {
	if g == nil {
		return 0
	}
	return g.inFlight.Load()
}

// Stalls counts, on the sender, waits for a credit (the receiver or the
// network is slower than the input); on the receiver, arrivals that found
// the writer still busy (the output is slower than the network).
func (g *Gauges) Stalls() int64 {
	if g == nil {
		return 0
	}
	return g.stalls.Load()
}

// Lag is, on a receiver with ReceiveConfig.Lag, the bytes written to its
// lag that its output has not taken yet.
func (g *Gauges) Lag() int64 {
	if g == nil {
		return 0
	}
	return g.lag.Load()
}

func (g *Gauges) setLag(n int64) {
	if g != nil {
		g.lag.Store(n)
	}
}

// setBytes records the byte count so far.
func (g *Gauges) setBytes(n int64) {
	if g != nil {
		g.bytes.Store(n)
	}
}

func (g *Gauges) addInFlight(n int64) {
	if g != nil {
		g.inFlight.Add(n)
	}
}

func (g *Gauges) stalled() {
	if g != nil {
		g.stalls.Add(1)
	}
}

// Hosts is, on a sender with SendConfig.HostsEvery, how far each host of
// the chain was behind in the last host report that passed its checks,
// from the receiver it sends to on, as far as one report reaches.
func (g *Gauges) Hosts() []HostLag {
	if g == nil {
		return nil
	}
	if h := g.hosts.Load(); h != nil {
		return slices.Clone(*h)
	}
	return nil
}

// RefusedReports counts, on a sender with SendConfig.HostsEvery, the
// host reports that failed their checks and were dropped.
func (g *Gauges) RefusedReports() int64 {
	if g == nil {
		return 0
	}
	return g.refused.Load()
}

func (g *Gauges) setHosts(h []HostLag, refused int64) {
	if g != nil {
		g.hosts.Store(&h)
		g.refused.Store(refused)
	}
}
