package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// fuzzBound bounds each fuzz input's I/O: a hang fails the input.
const fuzzBound = 10 * time.Second

// seedProposals are encoded proposals that seed the handshake fuzzers.
func seedProposals() [][]byte {
	var seeds [][]byte
	for _, p := range []conn.Params{proposal, local, conn.NewParams(1, 3), conn.NewParams(0, 4),
		{Version: conn.Version + 1, Chunk: 4096, Depth: 4}, {Version: conn.Version, Chunk: 4096, Depth: 4, Busy: true}} {
		b, _ := p.MarshalBinary()
		seeds = append(seeds, b)
	}
	return append(seeds, []byte("RDPP"), []byte("GET / HTTP/1.0\r\n\r\n"), []byte("SSH-2.0-OpenSSH_9.6\r\n"), nil)
}

// loopbackPair returns both ends of a new loopback TCP connection.
func loopbackPair(t *testing.T, ln net.Listener) (client, server net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	return client, server
}

// FuzzListenerHandshake feeds arbitrary bytes, from a loopback connection
// that then half-closes, to the listener's handshake, busy or not. The
// handshake never panics or hangs; it answers exactly a well-formed
// proposal (the negotiated parameters, a refusal with the listener's
// version, or the busy answer), hands Accept a Conn only for an accepted
// proposal, reports a refusal (KindSetup, conn.ErrRefused) only for a
// refused one, and closes every other connection without a word.
func FuzzListenerHandshake(f *testing.F) {
	for _, b := range seedProposals() {
		f.Add(b, false)
		f.Add(b, true)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	f.Fuzz(func(t *testing.T, data []byte, busy bool) {
		client, server := loopbackPair(t, ln)
		defer client.Close()
		l := newListener(local, fuzzBound)
		defer l.close()
		l.SetBusy(busy)
		_ = client.SetDeadline(time.Now().Add(fuzzBound))
		if _, err := client.Write(data); err != nil {
			t.Fatal(err)
		}
		_ = client.(*net.TCPConn).CloseWrite()

		a, ok := l.handshake(server)
		c, err := a.conn()
		if err != nil && a.err == nil {
			t.Fatal(err)
		}
		if c != nil {
			defer c.Close()
		}
		// The answer, if any, comes before the listener hangs up.
		reply := make([]byte, conn.ParamsLen)
		n, rerr := io.ReadFull(client, reply)
		var ne net.Error
		if errors.As(rerr, &ne) && ne.Timeout() {
			t.Fatalf("no answer and no hang-up within %v", fuzzBound)
		}
		reply = reply[:n]

		var prop conn.Params
		if prop.UnmarshalBinary(data) != nil {
			if ok || n != 0 {
				t.Fatalf("%q is no proposal, yet the handshake answered %q (ok %v, %+v)", data, reply, ok, a)
			}
			return
		}
		want, refused := conn.Negotiate(local, prop)
		switch {
		case refused != nil:
			want = conn.Params{Version: conn.Version}
			if ok || c != nil {
				t.Fatalf("refused %+v: ok %v, %+v", prop, ok, a)
			}
			select {
			case err := <-l.refused:
				if conn.KindOf(err) != conn.KindSetup || !errors.Is(err, conn.ErrRefused) {
					t.Fatalf("refused %+v, reported as %v", prop, err)
				}
			default:
				t.Fatalf("refused %+v, not reported", prop)
			}
		case busy:
			want = conn.Params{Version: conn.Version, Chunk: local.Chunk, Depth: local.Depth, Busy: true}
			if ok {
				t.Fatalf("busy, yet Accept would get %+v", a)
			}
		default:
			if !ok || c == nil || a.err != nil {
				t.Fatalf("accepted %+v: ok %v, %+v", prop, ok, a)
			}
			if info := c.Info(); info.Chunk != want.Chunk || info.Depth != want.Depth {
				t.Fatalf("accepted %+v as %+v, want %+v", prop, info, want)
			}
		}
		if b, _ := want.MarshalBinary(); !bytes.Equal(reply, b) {
			t.Fatalf("answered %q to %+v, want %q", reply, prop, b)
		}
	})
}

// FuzzDialReply feeds arbitrary bytes, from a stand-in receiver that then
// hangs up, to the dialer's half of the handshake. It never panics or
// hangs; it accepts exactly a valid answer within the proposal; a busy
// answer gives conn.ErrBusy; and every error message is one printable line of
// bounded length.
func FuzzDialReply(f *testing.F) {
	for _, b := range seedProposals() {
		f.Add(b)
	}
	f.Add([]byte(strings.Repeat("\xff", 100)))
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer server.Close()
			if _, err := io.ReadFull(server, make([]byte, conn.ParamsLen)); err == nil {
				_, _ = server.Write(data) // ends when the dialer hangs up
			}
		}()
		_ = client.SetDeadline(time.Now().Add(fuzzBound))
		p, err := propose(client, proposal, fuzzBound)
		_ = client.Close()
		<-done

		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("propose hung: %v", err)
		}
		var reply conn.Params
		decoded := reply.UnmarshalBinary(data) == nil
		valid := decoded && reply.Version == proposal.Version && !reply.Busy && reply.Validate() == nil &&
			reply.Chunk <= proposal.Chunk && reply.Depth <= proposal.Depth
		switch {
		case valid && (err != nil || p != reply):
			t.Fatalf("valid answer %+v: got %+v, %v", reply, p, err)
		case !valid && err == nil:
			t.Fatalf("answer %q accepted as %+v", data, p)
		case decoded && reply.Version == proposal.Version && reply.Busy && !errors.Is(err, conn.ErrBusy):
			t.Fatalf("busy answer %+v: %v", reply, err)
		}
		if err != nil {
			checkMessage(t, err.Error())
		}
	})
}

// checkMessage checks that an error message is one printable line of
// bounded length, whatever bytes the peer sent.
func checkMessage(t *testing.T, msg string) {
	t.Helper()
	if len(msg) > 300 || strings.ContainsFunc(msg, func(r rune) bool { return !unicode.IsPrint(r) }) {
		t.Fatalf("error message not one short printable line: %q", msg)
	}
}

// fuzzLayout is the small buffer layout of the frame fuzzer's Conn: one
// data receive buffer and one for control messages, 8 bytes each.
var fuzzLayout = conn.Layout{SendBufs: 1, SendSize: 8, RecvBufs: 2, RecvSize: 8}

// FuzzFrames feeds an arbitrary byte stream, which then ends, to a Conn's
// reader and polls it, posting each buffer again. The stream is written a
// whole frame at a time, the next once the last was taken and its buffer
// posted again, so that each finds one posted for it. It never panics or
// hangs; Poll returns exactly the whole frames the stream holds, each in a
// buffer of its kind, up to the first that does not fit or is cut short,
// and then the error that says which.
func FuzzFrames(f *testing.F) {
	f.Add([]byte{})
	f.Add(frame(0, 0))
	f.Add(append(frame(3, 0), "abc"...))
	f.Add(append(append(frame(8, 0), "12345678"...), frame(1, 1)...))
	f.Add(append(append(frame(ctrlFrame|2, 0), "ok"...), frame(3, 3)...))
	f.Add(frame(9, 9))
	f.Add(frame(1<<32-1, 0))
	f.Add(frame(1<<31, 0))
	f.Add(frame(5, 2))
	f.Add([]byte{1, 0})
	f.Add(frame(pulseFrame, 0))
	f.Add(append(frame(pulseFrame, 0), frame(2, 2)...))
	f.Fuzz(func(t *testing.T, stream []byte) {
		peer, nc := net.Pipe()
		defer peer.Close()
		c, err := newConn(nc, fuzzLayout, conn.NewParams(4, 3), 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.OpenWindow(); err != nil {
			t.Fatal(err)
		}
		frames, rest, wantErr := splitFrames(stream, fuzzLayout.RecvSize)
		taken := make(chan struct{})
		go func() {
			defer peer.Close()
			for _, fr := range frames {
				if _, err := peer.Write(fr.raw); err != nil {
					return
				}
				select {
				case <-taken:
				case <-time.After(fuzzBound):
					return
				}
			}
			_, _ = peer.Write(rest) // ends early when the reader fails
		}()
		ctx, cancel := context.WithTimeout(t.Context(), fuzzBound)
		defer cancel()
		cs := make([]conn.Completion, 4)
		var got int
		for {
			n, err := c.Poll(ctx, cs)
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("poll hung after %d messages", got)
			}
			if err != nil {
				if msg := "read from pipe: " + wantErr; err.Error() != msg {
					t.Fatalf("stream %q: poll: %v, want %s", stream, err, msg)
				}
				checkMessage(t, err.Error())
				break
			}
			for _, x := range cs[:n] {
				if got >= len(frames) {
					t.Fatalf("stream %q: message %d is one too many", stream, got)
				}
				want := frames[got]
				if x.Op != conn.OpRecv || (x.Buf >= c.bufs.spareFrom) != want.ctrl || !bytes.Equal(c.RecvBuf(x.Buf)[:x.Len], want.body) {
					t.Fatalf("stream %q: message %d arrived as %+v holding %q, want %q (control %v)", stream, got, x, c.RecvBuf(x.Buf)[:x.Len], want.body, want.ctrl)
				}
				got++
				_ = c.PostRecv(x.Buf) // fails once the stream has ended: Poll says why
				taken <- struct{}{}
			}
		}
		if got != len(frames) {
			t.Fatalf("stream %q: got %d messages, want %d", stream, got, len(frames))
		}
	})
}

// aFrame is a whole frame of a stream: its bytes, and the message it holds.
type aFrame struct {
	raw, body []byte
	ctrl      bool
}

// splitFrames splits stream into the whole frames a reader with receive
// buffers of size bytes (of either kind) delivers, the rest, and the
// error text (after the "read from ADDR: ") that ends them. Pulses deliver
// nothing: each goes with the frame after it.
func splitFrames(stream []byte, size int) ([]aFrame, []byte, string) {
	var frames []aFrame
	var pulses []byte // pulses since the last frame: they deliver nothing
	for {
		if len(stream) < frameHeaderLen {
			return frames, append(pulses, stream...), "peer closed the connection"
		}
		v := binary.LittleEndian.Uint32(stream)
		if v == pulseFrame {
			pulses, stream = append(pulses, stream[:frameHeaderLen]...), stream[frameHeaderLen:]
			continue
		}
		ctrl, n, kind := v&ctrlFrame != 0, v&^ctrlFrame, "data"
		if ctrl {
			kind = "control"
		}
		if uint64(n) > uint64(size) {
			return frames, append(pulses, stream...), fmt.Sprintf("peer sent a %d-byte %s message but its receive buffers hold %d bytes: the peer does not keep to the negotiated chunk size", n, kind, size)
		}
		if uint64(len(stream)-frameHeaderLen) < uint64(n) {
			return frames, append(pulses, stream...), "peer closed the connection in the middle of a message"
		}
		end := frameHeaderLen + int(n)
		raw := append(pulses, stream[:end]...)
		frames = append(frames, aFrame{raw: raw, body: raw[len(raw)-int(n):], ctrl: ctrl})
		pulses, stream = nil, stream[end:]
	}
}
