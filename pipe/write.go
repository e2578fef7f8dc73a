package pipe

import (
	"context"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/rdmapipe/rdmapipe/pipe/internal/sink"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// write writes each arrival's payload to w, re-posts its buffer and returns
// the credit; at the end of the stream it verifies the byte count and the
// checksum and confirms the stream to the sender. Credits go back in
// batches (see creditBatch) while more arrivals wait, and at once when
// none does. A regular file takes several writes at once (see package sink);
// buffers are still re-posted in arrival order. The event it returns is
// its report to the receive loop: confirmed, drained (see receiver.drain),
// failed (with the error) or stopped at the end of ctx.
func (r *receiver) write(ctx context.Context, arrivals <-chan *arrival, out sink.Sink) (e endEvent, err error) {
	defer func() {
		if e != evWriterDrained {
			// Writes that finished before the stream failed are kept
			// and counted: the output holds a longer exact prefix.
			r.written.Store(out.Close(r.written.Load()))
		}
	}()
	for {
		var a *arrival
		ok := true
		switch {
		case out.Pending() >= out.Limit():
			if err := r.retire(ctx, out, len(arrivals) > 0); err != nil || ctx.Err() != nil {
				return r.halt(ctx, err)
			}
			continue
		case out.Pending() > 0:
			select {
			case <-out.Oldest().Done:
				if err := r.retire(ctx, out, len(arrivals) > 0); err != nil || ctx.Err() != nil {
					return r.halt(ctx, err)
				}
				continue
			case a, ok = <-arrivals:
			}
		default:
			a, ok = <-arrivals
		}
		if !ok && r.drain.Load() && ctx.Err() == nil {
			// The sender was lost: what arrived intact is written, and
			// another sender may take over from there.
			if ok, err := r.retireAll(ctx, out); !ok {
				return r.halt(ctx, err)
			}
			return evWriterDrained, nil
		}
		if !ok || ctx.Err() != nil {
			return r.halt(ctx, nil) // the stream is over: leave the buffers alone
		}
		payload := r.c.RecvBuf(a.buf)[:a.len]
		if a.end {
			if ok, err := r.retireAll(ctx, out); !ok {
				return r.halt(ctx, err)
			}
			if err := r.finish(ctx, out, payload, a.seq); err != nil {
				return evWriterFailed, err
			}
			return evWriterConfirmed, nil
		}
		a.job.Wait()
		if !a.ok {
			return evWriterFailed, conn.Errorf(conn.KindIntegrity, "verify stream", "message %d does not match its tag under the shared key: it was altered on the way, or is not from this stream (nothing of it was written)", a.seq)
		}
		r.seal.Add(a.seq, a.len, a.d)
		if r.relay != nil && r.relay.forward(ctx, a.buf, payload) != nil {
			return r.halt(ctx, nil) // the stream is over
		}
		out.Start(a.buf, payload)
	}
}

// halt is the writer's report when it stops early: failed with err, or
// stopped at the end of ctx (or of the arrivals) if err is nil.
func (r *receiver) halt(ctx context.Context, err error) (endEvent, error) {
	if err != nil {
		return evWriterFailed, err
	}
	return evWriterStopped, r.cancelled(ctx)
}

// retireAll retires every write in flight (see retire) and reports
// whether it did: not if one failed (err) or ctx ended.
func (r *receiver) retireAll(ctx context.Context, out sink.Sink) (bool, error) {
	for out.Pending() > 0 {
		if err := r.retire(ctx, out, false); err != nil || ctx.Err() != nil {
			return false, err
		}
	}
	return true, nil
}

// retire waits for the oldest write in flight, re-posts its buffer and
// returns its credit: at once, or batched with later ones while more is
// on its way (more, or writes still in flight).
func (r *receiver) retire(ctx context.Context, out sink.Sink, more bool) error {
	w := out.Oldest()
	select {
	case <-w.Done:
	default:
		if l, ok := out.(*sink.Lag); ok {
			l.Hurry() // the receive buffers it writes from are due back
		}
		<-w.Done
	}
	out.Retire()
	if errors.Is(w.Err, sink.ErrBehind) {
		return &conn.Error{Kind: conn.KindAborted, Op: "keep up", Err: fmt.Errorf("%w, after %d bytes: this receiver leaves the chain, which goes on without it", w.Err, r.written.Load())}
	}
	if w.Err != nil {
		return &conn.Error{Kind: conn.KindAborted, Op: "write output", Err: fmt.Errorf("%w (after %d bytes): the stream was cut short", w.Err, r.written.Load()+int64(w.N))}
	}
	if ctx.Err() != nil || r.relay != nil && r.relay.wait(ctx, w.Buf) != nil {
		// The stream is over (a relay's wait ends only with ctx): leave
		// the buffers alone, but count what the output holds.
		r.written.Add(int64(w.N))
		return nil
	}
	r.messages.Add(1)
	n := r.written.Add(int64(w.N))
	r.cfg.Gauges.setBytes(n)
	r.cfg.Gauges.addInFlight(-1)
	if r.cfg.Progress != nil {
		r.cfg.Progress(n)
	}
	if r.drain.Load() {
		return nil // the sender is lost: nothing to re-post or return
	}
	// A failed re-post means the connection broke: the receive loop
	// hears of that from Poll, after what arrived before it.
	r.repost(w.Buf)
	if r.pending++; r.pending < r.batch && (more || out.Pending() > 0) {
		return nil
	}
	err := r.c.SendControl(ctx, []byte{byte(r.pending)})
	r.pending = 0
	if err != nil {
		if ctx.Err() != nil || r.cfg.Rejoin != nil {
			// With Rejoin the receive loop decides what a broken
			// connection means, after what arrived before it.
			return nil
		}
		return r.sendFailed(ctx, fmt.Errorf("return a credit: %w", err))
	}
	return nil
}

// creditBatchBytes bounds the payload whose credits a batch may hold back.
const creditBatchBytes = 1 << 20

// creditBatch returns how many credits the receiver returns in one message
// while more data waits to be written: one for large chunks, where a
// message per chunk costs nothing, and up to a quarter of the window for
// small ones, holding back at most creditBatchBytes of payload, so that
// per-message costs shrink while the sender never runs short.
func creditBatch(chunk, credits int) int {
	return max(1, min(credits/4, creditBatchBytes/max(chunk, 1)))
}

// finish checks the end-of-stream message against what was written,
// ends the stream to the next receiver, completes the output and confirms
// the stream to the sender.
func (r *receiver) finish(ctx context.Context, out sink.Sink, end []byte, seq uint32) error {
	wantBytes := int64(binary.LittleEndian.Uint64(end))
	wantSum := binary.LittleEndian.Uint64(end[8:])
	written := r.written.Load()
	sum, tag := r.seal.End(seq, written)
	if tag != nil && !hmac.Equal(end[wire.EndBody:wire.EndBody+auth.MACLen], tag) {
		return conn.Errorf(conn.KindIntegrity, "verify stream", "the stream does not match its MAC under the shared key: it was altered, reordered or cut on the way")
	}
	if wantBytes != written {
		return conn.Errorf(conn.KindIntegrity, "verify stream", "the sender sent %d bytes but %d arrived", wantBytes, written)
	}
	if tag == nil && wantSum != sum {
		return conn.Errorf(conn.KindIntegrity, "verify stream", "checksum mismatch: the sender's is %016x, the data received gives %016x", wantSum, sum)
	}
	r.sum = sum
	if r.relay != nil {
		r.relay.end() // at the chain's pace, whatever this output's
	}
	if err := out.End(); err != nil {
		return &conn.Error{Kind: conn.KindAborted, Op: "write output", Err: err}
	}
	receivers := uint32(1)
	if r.relay != nil {
		down, lost, err := r.relay.confirmed(ctx)
		if err != nil {
			return err
		}
		receivers += uint32(down)
		r.lostDown = lost
	}
	if r.cfg.Sync != nil {
		if err := r.cfg.Sync(); err != nil {
			if ce := (*conn.Error)(nil); errors.As(err, &ce) {
				return err
			}
			return &conn.Error{Kind: conn.KindAborted, Op: "sync output", Err: fmt.Errorf("%w: the stream arrived whole but may not be on disk", err)}
		}
	}
	lost := lostText(r.lostDown)
	if err := r.sendLost(ctx, lost); err != nil {
		return err
	}
	done := make([]byte, wire.DoneLen, wire.DoneLen+auth.MACLen)
	done[0] = wire.MsgDone
	binary.LittleEndian.PutUint64(done[1:], uint64(written))
	binary.LittleEndian.PutUint32(done[9:], receivers)
	done = append(done, r.seal.Done(written, receivers, tag, lost)...)
	// Everything arrived intact and is written: if the confirmation cannot
	// be sent (the sender is gone), the sender fails, not this side, and
	// the writer reports the stream confirmed.
	_ = r.c.SendControl(ctx, done)
	return nil
}
