package pipe

import "sync/atomic"

// Gauges are a stream's live counters, for reports while it runs (such as
// rdmasend --stats-interval). Send and Receive update the Gauges given in
// their configuration; any goroutine may read them. A nil *Gauges reads as zero.
type Gauges struct {
	bytes    atomic.Int64
	inFlight atomic.Int64
	stalls   atomic.Int64
	lag      atomic.Int64
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
