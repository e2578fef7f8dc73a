package pipe

import (
	"context"
	"encoding/binary"
	"math"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/source"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
	"github.com/rdmapipe/rdmapipe/pipe/internal/work"
)

// message is a filled buffer on its way to the wire: the reader queues it
// with the job that seals it, the poster posts it once the job has run.
type message struct {
	buf, n int // the buffer and its payload's length; 0 for the end of the stream
	seq    uint32
	job    *work.Job   // seals it: sets d
	d      seal.Digest // the payload's digest
	rerr   error       // the input's error after the payload
}

// buf is the buffer data message i is sent from: a send buffer, or a
// receive buffer of the connection a relay forwards from.
func (s *sender) buf(i int) []byte {
	if s.fwd != nil {
		return s.fwd.from.RecvBuf(i)
	}
	return s.c.SendBuf(i)
}

// read fills send buffers from the source and hands them to the poster,
// each with a job for the pool that seals it, then the end of the stream.
// A message below inlineMin with nothing queued before it (a line typed
// into the stream) it seals and posts itself, sparing it two hand-overs.
func (s *sender) read(ctx context.Context, src source.Source, pool *work.Pool, msgs chan<- *message) error {
	var seq uint32
	var index uint64 // of data messages: the nonce of a keyed one's tag
	var read int64
	room := s.seal.Room()
	inline := s.inlineMin(src)
	for {
		i, n, eof, rerr := src.Next(ctx)
		if ctx.Err() != nil {
			return context.Cause(ctx) // the stream is over: leave the buffer alone
		}
		if n == 0 && !eof {
			return conn.Errorf(conn.KindAborted, "read input", "%v (after %d bytes)", rerr, read)
		}
		seq++
		m := &message{buf: i, n: n, seq: seq, rerr: rerr}
		// The poster is idle when nothing is queued, and only this
		// goroutine queues: then the message may skip it.
		direct := n < inline && s.queued.Load() == 0
		if n > 0 {
			index++
			read += int64(n)
			b, at := s.buf(i)[:n+room], index
			m.job = pool.Go(func() {
				w := <-s.sealers
				m.d = w.Seal(at, b, n)
				s.sealers <- w
			}, direct)
		}
		if direct {
			if _, err := s.postMessage(ctx, m); err != nil || n == 0 {
				return err
			}
			continue
		}
		s.queued.Add(1)
		select {
		case msgs <- m:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if n == 0 || rerr != nil {
			return nil
		}
	}
}

// inlineMin returns the payload below which the reader seals and posts a
// message itself when nothing is queued before it: parallelMin, except
// for an unkeyed stream that the reader reads itself (a pipe) over a
// connection that copies what it sends (TCP), which it sends that way
// whole. There a poster would only add its hand-overs, and XXH3 costs a
// small part of the read's own copy, on bytes still in this core's cache.
func (s *sender) inlineMin(src source.Source) int {
	if !s.seal.Keyed() && src.Serial() && s.fwd == nil && s.c.Info().Copies {
		return math.MaxInt
	}
	return parallelMin(s.seal)
}

// post posts the messages the reader queued, in order.
func (s *sender) post(ctx context.Context, msgs <-chan *message) error {
	for m := range msgs {
		end, err := s.postMessage(ctx, m)
		if err != nil || end {
			return err
		}
		s.queued.Add(-1)
	}
	return nil // the reader failed, and said why
}

// postMessage posts message m once it is sealed and a credit is there for
// it, and reports whether it was the end of the stream, which carries the
// byte count and the stream's checksum or tag. The poster calls it, or
// the reader when the poster is idle: never both at once.
func (s *sender) postMessage(ctx context.Context, m *message) (end bool, err error) {
	if m.job != nil {
		m.job.Wait()
	}
	if err := s.credit(ctx); err != nil {
		return false, err
	}
	if m.n == 0 {
		buf := s.c.SendBuf(m.buf)
		s.sum, s.tag = s.seal.End(m.seq, s.sent.Load())
		binary.LittleEndian.PutUint64(buf, uint64(s.sent.Load()))
		binary.LittleEndian.PutUint64(buf[8:], s.sum)
		size := wire.EndBody + copy(buf[wire.EndBody:], s.tag)
		wire.PutTrailer(buf[size:], wire.MsgEnd, m.seq)
		s.ended.Store(true)
		if err := s.c.PostSend(m.buf, size+conn.TrailerLen); err != nil {
			return true, s.sendFailed(ctx, err)
		}
		s.posted.Store(m.seq)
		s.spoken()
		return true, nil
	}
	post := s.c.PostSend
	if s.fwd != nil {
		post = s.fwd.PostForward
	}
	size := m.n + s.seal.Room()
	wire.PutTrailer(s.buf(m.buf)[size:], wire.MsgData, m.seq)
	if err := post(m.buf, size+conn.TrailerLen); err != nil {
		return false, s.sendFailed(ctx, err)
	}
	s.posted.Store(m.seq)
	s.spoken()
	s.seal.Add(m.seq, m.n, m.d)
	if s.fwd != nil {
		s.fwd.done(m.buf) // done with it here; the completion says the same of the wire
	}
	sent := s.sent.Add(int64(m.n))
	s.messages.Add(1)
	s.cfg.gauges.setBytes(sent)
	if s.cfg.progress != nil {
		s.cfg.progress(sent)
	}
	if m.rerr != nil {
		return false, conn.Errorf(conn.KindAborted, "read input", "%v (after %d bytes)", m.rerr, sent)
	}
	return false, nil
}
