package pipe

import (
	"context"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/auth"
	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

const (
	ceilChunk  = 4 << 20   // the commands' chunk where locked memory is not limited (internal/sendrecv)
	ceilDepth  = 8         // and their depth
	ceilStream = 256 << 20 // bytes per Send or Receive: one op
)

// ceilKey is the shared key of the keyed and encrypted rows.
var ceilKey = []byte("rdmapipe ceiling benchmark key!!")

// ceilMode is how a row's stream is protected.
type ceilMode struct {
	name    string
	key     []byte // nil: none
	encrypt bool   // Config.Encrypt
}

// ceilModes are the rows of each side: a checksum, a MAC, encryption.
var ceilModes = []ceilMode{{"unkeyed", nil, false}, {"keyed", ceilKey, false}, {"encrypted", ceilKey, true}}

// sendConfig is the sender's configuration in mode m.
func (m ceilMode) sendConfig() SendConfig {
	return SendConfig{Key: m.key, Encrypt: m.encrypt, Timeout: ceilTimeout}
}

// receiveConfig is the receiver's configuration in mode m.
func (m ceilMode) receiveConfig() ReceiveConfig {
	return ReceiveConfig{Key: m.key, Encrypt: m.encrypt, Timeout: ceilTimeout}
}

// integrity is what Stats.Integrity says of a stream in mode m.
func (m ceilMode) integrity() string {
	switch {
	case m.encrypt:
		return "aes-256-gcm"
	case m.key != nil:
		return "aes-gmac"
	}
	return "xxh3"
}

// room is how many bytes a data message of mode m carries between its
// payload and its trailer: the tag, with a key.
func (m ceilMode) room() int {
	if m.key != nil {
		return conn.TagLen
	}
	return 0
}

// ceilTimeout is the commands' default --timeout: it sets the sender's
// heartbeat interval and both sides' idle timeout.
const ceilTimeout = time.Minute

// BenchmarkCeiling measures each side's own ceiling, independent of any
// network (issue 18; bench/ceiling.sh makes a table of it):
//
//	go test -run '^$' -bench Ceiling -cpu 1,2 ./pipe
//
// sender/*: the real Send, reading a regular file in /dev/shm (pread from
// the page cache, as `rdmasend < file` does), into a fakeReceiver that
// completes every post at once. receiver/*: the real Receive, writing to
// /dev/null opened as a file (write(2), as `rdmarecv > /dev/null` does;
// the kernel copies nothing), fed by a fakeSender whose messages are
// already in the receive buffers. Each side unkeyed (XXH3 per
// message), keyed (GMAC per message) and encrypted (AES-256-GCM per
// message), on the engine's pool of GOMAXPROCS workers. Both run the
// commands' window where locked memory is not limited (4 MiB x 8), one
// ceilStream-byte stream per op, handshake included. memcpy and cat are
// the references: what GOMAXPROCS copy loops manage, and what one read(2)
// loop from the page cache manages. Every row reports GB/cpu-s too (see
// reportCPU).
func BenchmarkCeiling(b *testing.B) {
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		b.Skip("no /dev/shm for the input file")
	}
	path := ceilFile(b)
	// Each unkeyed side runs right before its reference, so that the two
	// see the same moment of a shared machine (bench/ceiling.sh pairs them).
	for _, m := range ceilModes {
		b.Run("sender/"+m.name, func(b *testing.B) { benchSender(b, path, m) })
		if m.key == nil {
			b.Run("cat", func(b *testing.B) { benchCat(b, path) })
		}
	}
	for _, m := range ceilModes {
		b.Run("receiver/"+m.name, func(b *testing.B) { benchReceiver(b, m) })
		if m.key == nil {
			b.Run("memcpy", benchMemcpy)
		}
	}
}

// ceilFile writes a ceilStream-byte file of pseudo-random bytes in
// /dev/shm, removed when b ends.
func ceilFile(b *testing.B) string {
	f, err := os.CreateTemp("/dev/shm", "rdmapipe-ceiling-*")
	if err != nil {
		b.Skipf("no room in /dev/shm: %v", err)
	}
	b.Cleanup(func() { os.Remove(f.Name()) })
	block := ceilPayload()
	for range ceilStream / ceilChunk {
		if _, err := f.Write(block); err != nil {
			f.Close()
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return f.Name()
}

// ceilPayload returns a chunk of pseudo-random bytes, the same each time.
func ceilPayload() []byte {
	p := make([]byte, ceilChunk)
	_, _ = rand.NewChaCha8([32]byte{'r', 'd', 'm', 'a'}).Read(p)
	return p
}

// ceilMap returns n bytes of page-aligned anonymous memory, as a transport
// registers, touched so that no page fault lands in the measurement and
// unmapped when b ends.
func ceilMap(b *testing.B, n int) []byte {
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = unix.Munmap(m) })
	for i := range m {
		m[i] = 0xff
	}
	return m
}

// cpuTime returns the CPU time, user and system, that the process has used
// so far, all its threads together.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports, as GB/cpu-s, how many bytes b's ops moved (b.N ops
// of bytes each) per second of the CPU time cpu they took: what one core
// would move if the work spread over cores perfectly, whatever else runs
// on the machine; a rate of R GB/s takes R / it cores.
func reportCPU(b *testing.B, cpu time.Duration, bytes int64) {
	if cpu > 0 {
		b.ReportMetric(float64(bytes)*float64(b.N)/cpu.Seconds()/1e9, "GB/cpu-s")
	}
}

// ceilInfo is what both fakes report: only Chunk and Depth matter to the
// engine (and to the transcript both sides MAC).
var ceilInfo = conn.Info{Transport: "ceiling", Local: "fake", Remote: "fake", Chunk: ceilChunk, Depth: ceilDepth}

// errNoBuffer is a fake's verdict on an engine that did not re-post a
// receive buffer in time for a message the protocol allows: a real
// transport fails the connection then too.
var errNoBuffer = errors.New("no receive buffer posted for the message")

// benchSender measures Send in mode m from the file at path into a
// fakeReceiver.
func benchSender(b *testing.B, path string, m ceilMode) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	c := newFakeReceiver(b, m)
	defer c.Close()
	cfg := m.sendConfig()
	b.SetBytes(ceilStream)
	cpu := cpuTime(b)
	for b.Loop() {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			b.Fatal(err)
		}
		if err := c.reset(); err != nil {
			b.Fatal(err)
		}
		st, err := Send(context.Background(), c, f, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if st.Bytes != ceilStream || st.IO != "pread" || st.Integrity != m.integrity() {
			b.Fatalf("sent %d bytes by %q with %q, want %d by pread with %q", st.Bytes, st.IO, st.Integrity, ceilStream, m.integrity())
		}
	}
	reportCPU(b, cpuTime(b)-cpu, ceilStream)
}

// fakeReceiver is the receiving end of a connection for a Send alone: an
// infinitely fast receiver. It says hello as Receive does (a fresh nonce;
// the key flag in keyed mode), checks the sender's key proof against the
// transcript (pipe/internal/auth) and that the sender encrypts exactly
// when its mode says so, and welcomes it with its own proof. Every
// PostSend completes at once: a data message is not read at all, only its
// trailer and its length (a chunk, and the tag with a key), and its credit
// comes straight back as a one-byte message; the end message is confirmed
// with the byte count it carries and, keyed, the MAC of the confirmation
// over the stream tag it carries. That is all the sender checks of a
// confirmation, so the fake hashes no payload: it takes the sender's
// checksum and tags as they are, which a real receiver would recompute
// (the receiver rows measure that).
type fakeReceiver struct {
	mode   ceilMode
	send   [][]byte // the sender's send buffers
	recv   [][]byte // the sender's receive buffers, for this side's messages
	posted chan int // receive buffers posted by the sender, oldest first
	cq     chan conn.Completion
	closed chan struct{}
	once   sync.Once
	short  bool   // data messages shorter than a chunk are taken too (a pipe's)
	hello  []byte // this stream's hello, for the transcript
	t      []byte // the transcript once the sender's proof checked out (keyed)
}

// newFakeReceiver returns a fakeReceiver in mode m with the buffers of a
// sender's side (conn.SenderLayout).
func newFakeReceiver(b *testing.B, m ceilMode) *fakeReceiver {
	l := conn.SenderLayout(conn.NewParams(ceilChunk, ceilDepth))
	f := &fakeReceiver{mode: m, posted: make(chan int, l.RecvBufs), cq: make(chan conn.Completion, 4*(l.SendBufs+l.RecvBufs)), closed: make(chan struct{})}
	for range l.SendBufs {
		f.send = append(f.send, ceilMap(b, l.SendSize))
	}
	for range l.RecvBufs {
		f.recv = append(f.recv, make([]byte, l.RecvSize))
	}
	return f
}

// reset makes f a fresh connection, every receive buffer posted, and says
// hello.
func (f *fakeReceiver) reset() error {
	for len(f.cq) > 0 {
		<-f.cq
	}
	for len(f.posted) > 0 {
		<-f.posted
	}
	for i := range f.recv {
		f.posted <- i
	}
	nonce, err := auth.NewNonce()
	if err != nil {
		return err
	}
	f.hello = []byte{wire.MsgHello, 0}
	if f.mode.key != nil {
		f.hello[1] = wire.FlagKey
	}
	f.hello, f.t = append(f.hello, nonce[:]...), nil
	return f.deliver(f.hello)
}

// deliver puts msg, a message of this side's, into the next receive buffer
// the sender posted.
func (f *fakeReceiver) deliver(msg []byte) error {
	select {
	case i := <-f.posted:
		f.cq <- conn.Completion{Op: conn.OpRecv, Buf: i, Len: copy(f.recv[i], msg)}
		return nil
	default:
		return errNoBuffer
	}
}

// SendControl answers the sender's authentication with a control credit
// and the welcome, and a heartbeat with a control credit.
func (f *fakeReceiver) SendControl(_ context.Context, p []byte) error {
	body, typ, _, err := wire.ParseTrailer(p)
	if err != nil {
		return err
	}
	switch typ {
	case wire.MsgAuth:
		if len(body) < wire.AuthBody || (body[0]&wire.FlagKey != 0) != (f.mode.key != nil) || (body[0]&wire.FlagEncrypt != 0) != f.mode.encrypt {
			return fmt.Errorf("fake receiver: authentication %s does not match its key and encryption", wire.Describe(p))
		}
		welcome := make([]byte, 2+auth.MACLen)
		welcome[0] = wire.MsgWelcome
		if f.mode.key != nil {
			t := auth.Transcript(ceilInfo, f.hello, body[0], body[wire.AuthNonce:wire.AuthID], body[wire.AuthID:wire.AuthPlace], binary.LittleEndian.Uint32(body[wire.AuthPlace:]), nil)
			if !auth.ValidProof(f.mode.key, auth.SenderProof, t, body[wire.AuthMAC:wire.AuthBody]) {
				return errors.New("fake receiver: the sender's key proof is wrong")
			}
			f.t = t
			welcome[1] = wire.FlagKey
			copy(welcome[2:], auth.Proof(f.mode.key, auth.ReceiverProof, t))
		}
		if err := f.deliver([]byte{wire.CtrlReturn}); err != nil {
			return err
		}
		return f.deliver(welcome)
	case wire.MsgBeat:
		return f.deliver([]byte{wire.CtrlReturn})
	case wire.MsgAbort:
		return nil // Send returns why
	}
	return fmt.Errorf("fake receiver: unexpected control message %s", wire.Describe(p))
}

// PostSend completes at once: a data message's credit comes back, the
// end message is confirmed.
func (f *fakeReceiver) PostSend(i, n int) error {
	return f.take(f.send[i][:n], conn.Completion{Op: conn.OpSend, Buf: i, Len: n})
}

// take completes the post of msg with c and answers it: a data message
// with its credit, the end message with the confirmation.
func (f *fakeReceiver) take(msg []byte, c conn.Completion) error {
	body, typ, _, err := wire.ParseTrailer(msg)
	if err != nil {
		return err
	}
	f.cq <- c
	switch typ {
	case wire.MsgData:
		if len(body) != ceilChunk+f.mode.room() && !(f.short && len(body) > f.mode.room() && len(body) < ceilChunk+f.mode.room()) {
			return fmt.Errorf("fake receiver: a %d-byte data message, want a chunk and %d bytes of tag", len(body), f.mode.room())
		}
		return f.deliver([]byte{1})
	case wire.MsgEnd:
		if len(body) < wire.EndBody {
			return fmt.Errorf("fake receiver: short end message %s", wire.Describe(body))
		}
		bytes := binary.LittleEndian.Uint64(body)
		done := make([]byte, wire.DoneLen, wire.DoneLen+auth.MACLen)
		done[0] = wire.MsgDone
		binary.LittleEndian.PutUint64(done[1:], bytes)
		binary.LittleEndian.PutUint32(done[9:], 1)
		if f.mode.key != nil {
			if len(body) < wire.EndBody+auth.MACLen {
				return errors.New("fake receiver: end message without the stream tag")
			}
			// The confirmation's MAC covers the stream tag the sender
			// sent, taken as it is: HMACs of a few bytes, no payload.
			tag := body[wire.EndBody : wire.EndBody+auth.MACLen]
			done = append(done, seal.NewKeyed(auth.StreamKey(f.mode.key, f.t), f.mode.encrypt).Done(int64(bytes), 1, tag, nil)...)
		}
		return f.deliver(done)
	}
	return fmt.Errorf("fake receiver: unexpected message %s", wire.Describe(body))
}

// PostRecv re-posts receive buffer i.
func (f *fakeReceiver) PostRecv(i int) error {
	select {
	case f.posted <- i:
		return nil
	default:
		return fmt.Errorf("fake receiver: buffer %d posted twice", i)
	}
}

// Poll returns the completions queued, waiting for one if there is none.
func (f *fakeReceiver) Poll(ctx context.Context, cs []conn.Completion) (int, error) {
	select {
	case cs[0] = <-f.cq:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-f.closed:
		return 0, conn.ErrClosed
	}
	n := 1
	for ; n < len(cs) && len(f.cq) > 0; n++ {
		cs[n] = <-f.cq
	}
	return n, nil
}

func (f *fakeReceiver) SendBuf(i int) []byte { return f.send[i] }
func (f *fakeReceiver) RecvBuf(i int) []byte { return f.recv[i] }
func (f *fakeReceiver) SendBufs() int        { return len(f.send) }
func (f *fakeReceiver) RecvBufs() int        { return len(f.recv) }
func (f *fakeReceiver) Info() conn.Info      { return ceilInfo }

// Close unblocks Poll; the buffers go when the benchmark ends.
func (f *fakeReceiver) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// benchReceiver measures Receive in mode m from a fakeSender to /dev/null.
func benchReceiver(b *testing.B, m ceilMode) {
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	benchReceiverTo(b, m, out, func() error { return nil }, "write")
}

// benchReceiverTo measures Receive in mode m from a fakeSender to out,
// which rewind makes ready for the next stream and to which the receiver
// must write as io says (Stats.IO).
func benchReceiverTo(b *testing.B, m ceilMode, out io.Writer, rewind func() error, io string) {
	benchReceiveWith(b, m, m.receiveConfig(), 1, out, rewind, io)
}

// benchReceiveWith is benchReceiverTo with the receiver's configuration
// cfg, whose confirmations count receivers.
func benchReceiveWith(b *testing.B, m ceilMode, cfg ReceiveConfig, receivers uint32, out io.Writer, rewind func() error, io string) {
	c := newFakeSender(b, m)
	defer c.Close()
	b.SetBytes(ceilStream)
	cpu := cpuTime(b)
	for b.Loop() {
		if err := rewind(); err != nil {
			b.Fatal(err)
		}
		c.reset()
		st, err := Receive(context.Background(), c, out, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.confirmed(receivers); err != nil {
			b.Fatal(err)
		}
		if st.Bytes != ceilStream || st.IO != io || st.Integrity != m.integrity() {
			b.Fatalf("received %d bytes by %q with %q, want %d by %s with %q", st.Bytes, st.IO, st.Integrity, ceilStream, io, m.integrity())
		}
	}
	reportCPU(b, cpuTime(b)-cpu-c.untimed, ceilStream)
}

// fakeSender is the sending end of a connection for a Receive alone: an
// infinitely fast sender whose data messages are already where the NIC
// would have put them. Its data receive buffers (the first credits ones;
// the last conn.SpareRecvs take its control messages, as the RDMA ring
// keeps them) hold the payload from the start, so that delivering a data
// message only writes its 8-byte trailer (type, sequence number) and, with
// a key, its 16-byte tag, and reports OpRecv, whenever the receiver has
// returned a credit. It answers the receiver's hello with its
// authentication (a fresh nonce; keyed: the proof over the transcript,
// pipe/internal/auth; encrypted: the flag) and checks the welcome's proof.
//
// What depends on the handshake's nonces is made per stream by prepare,
// with the benchmark timer stopped while the receiver waits for the
// authentication: the end message's checksum (unkeyed), each message's
// tag and the stream tag (keyed), and each message's ciphertext
// (encrypted). The receiver decrypts in place, so an encrypted stream's
// 64 messages each have a buffer of ciphertext of their own, and
// delivering one makes it the receive buffer's memory (RecvBuf) until the
// buffer is posted again: the NIC's DMA costs the receiver nothing, as
// with the other modes, and the receiver reads each message from memory
// as it would after a DMA.
type fakeSender struct {
	b        *testing.B // whose timer stops while prepare runs
	mode     ceilMode
	ring     [][]byte      // the data buffers [0, credits), then the spares
	recv     [][]byte      // what RecvBuf returns: ring, or a message of sealed
	msg      []byte        // the payload of every data message, and room for its tag
	digest   seal.Digest   // of the payload, unkeyed
	untimed  time.Duration // CPU time prepare took, all streams
	sealed   [][]byte      // encrypted: each message's ciphertext and tag
	chunks   int           // data messages per stream
	credits  int           // the receiver's window
	data     chan int      // data buffers posted, oldest first
	spares   chan int      // spare buffers posted
	returned chan int      // data credits from the receiver (and the first ones, with the welcome)
	ctl      chan conn.Completion
	closed   chan struct{}
	once     sync.Once

	// Set by SendControl during the handshake (the receiver's own
	// goroutine, which polls) or after the stream.
	hello   []byte
	t       []byte
	st      *seal.Stream        // the stream's combination, from prepare
	tags    [][conn.TagLen]byte // keyed: each message's tag, from prepare
	sum     uint64              // of the end message, from prepare
	tag     []byte              // of the end message, from prepare
	doneMsg []byte              // the receiver's confirmation

	// Poll's own.
	have  int    // data credits in hand
	seq   uint32 // of the last message delivered
	ended int    // the buffer that carried the end message, or -1
}

// newFakeSender returns a fakeSender in mode m with the buffers of a
// receiver's side (conn.ReceiverLayout, the spares MaxControl bytes).
func newFakeSender(b *testing.B, m ceilMode) *fakeSender {
	p := conn.NewParams(ceilChunk, ceilDepth)
	f := &fakeSender{b: b, mode: m, chunks: ceilStream / ceilChunk, credits: p.Credits(), ended: -1}
	f.msg = append(ceilPayload(), make([]byte, conn.TagLen)...)
	f.digest = seal.New(nil).Worker().Seal(0, f.msg, ceilChunk) // unkeyed: the payload's XXH3
	size := ceilChunk + conn.TagLen + conn.TrailerLen
	for range f.credits {
		buf := ceilMap(b, size)
		copy(buf, f.msg[:ceilChunk])
		f.ring = append(f.ring, buf)
	}
	for range conn.SpareRecvs {
		f.ring = append(f.ring, make([]byte, conn.MaxControl))
	}
	f.recv = append([][]byte(nil), f.ring...)
	switch {
	case m.encrypt:
		for range f.chunks {
			f.sealed = append(f.sealed, ceilMap(b, size))
		}
	case m.key != nil:
		f.tags = make([][conn.TagLen]byte, f.chunks)
	}
	f.data, f.spares = make(chan int, f.credits), make(chan int, conn.SpareRecvs)
	f.returned, f.ctl = make(chan int, 4*len(f.recv)), make(chan conn.Completion, conn.SpareRecvs)
	f.closed = make(chan struct{})
	return f
}

// reset makes f a fresh connection, every receive buffer posted.
func (f *fakeSender) reset() {
	for len(f.data) > 0 {
		<-f.data
	}
	for len(f.spares) > 0 {
		<-f.spares
	}
	for len(f.returned) > 0 {
		<-f.returned
	}
	for len(f.ctl) > 0 {
		<-f.ctl
	}
	copy(f.recv, f.ring)
	for i := range f.recv {
		if i < f.credits {
			f.data <- i
		} else {
			f.spares <- i
		}
	}
	if f.ended >= 0 {
		copy(f.ring[f.ended], f.msg[:ceilChunk]) // the end message overwrote its start
	}
	f.hello, f.t, f.st, f.tag, f.doneMsg = nil, nil, nil, nil, nil
	f.have, f.seq, f.ended = 0, 0, -1
}

// SendControl takes the receiver's messages: credits, the hello (answered
// with the authentication), the welcome (which grants the window) and the
// confirmation (kept for confirmed).
func (f *fakeSender) SendControl(_ context.Context, p []byte) error {
	switch {
	case len(p) == 1:
		if k := int(p[0] &^ wire.CtrlReturn); k > 0 {
			f.returned <- k
		}
		return nil // a control credit: this fake sends nothing under one after the handshake
	case p[0] == wire.MsgHello && len(p) >= 2+auth.NonceLen:
		f.hello = append([]byte(nil), p...)
		return f.authenticate()
	case p[0] == wire.MsgWelcome && len(p) >= 2+auth.MACLen:
		if f.mode.key != nil && !auth.ValidProof(f.mode.key, auth.ReceiverProof, f.t, p[2:2+auth.MACLen], p[2+auth.MACLen:]) {
			return errors.New("fake sender: the receiver's key proof is wrong")
		}
		f.returned <- f.credits
		return nil
	case p[0] == wire.MsgDone:
		f.doneMsg = append([]byte(nil), p...)
		return nil
	case p[0] == wire.MsgAbort:
		return nil // Receive returns why
	}
	return fmt.Errorf("fake sender: unexpected message %s", wire.Describe(p))
}

// authenticate prepares the stream and queues the sender's answer to the
// hello in a spare.
func (f *fakeSender) authenticate() error {
	nonce, err := auth.NewNonce()
	if err != nil {
		return err
	}
	body := make([]byte, wire.AuthBody)
	copy(body[wire.AuthNonce:], nonce[:])
	binary.LittleEndian.PutUint32(body[wire.AuthPlace:], 1)
	if f.mode.key != nil {
		body[0] = wire.FlagKey
		if f.mode.encrypt {
			body[0] |= wire.FlagEncrypt
		}
		f.t = auth.Transcript(ceilInfo, f.hello, body[0], nonce[:], body[wire.AuthID:wire.AuthPlace], 1, nil)
		copy(body[wire.AuthMAC:], auth.Proof(f.mode.key, auth.SenderProof, f.t))
	}
	f.prepare(nonce[:])
	select {
	case i := <-f.spares:
		f.ctl <- conn.Completion{Op: conn.OpRecv, Buf: i, Len: copy(f.recv[i], wire.AppendTrailer(body, wire.MsgAuth, 0))}
		return nil
	default:
		return errNoBuffer
	}
}

// prepare does, with the benchmark timer stopped, a real sender's work on
// the stream whose handshake carries senderNonce: each data message's tag
// (keyed) or ciphertext and tag (encrypted), combined in order (package
// seal) into the end message's checksum or stream tag. The receiver waits
// for the authentication meanwhile; its CPU time is left out of the
// receiver's too.
func (f *fakeSender) prepare(senderNonce []byte) {
	f.b.StopTimer()
	cpu := cpuTime(f.b)
	defer func() {
		f.untimed += cpuTime(f.b) - cpu
		f.b.StartTimer()
	}()
	if f.mode.key == nil {
		f.st = seal.New(streamID(f.hello[2:2+auth.NonceLen], senderNonce))
	} else {
		f.st = seal.NewKeyed(auth.StreamKey(f.mode.key, f.t), f.mode.encrypt)
	}
	w := f.st.Worker()
	for k := range f.chunks {
		index := uint64(k + 1) // the nonce of a keyed message's tag
		d := f.digest
		switch {
		case f.mode.encrypt:
			copy(f.sealed[k], f.msg[:ceilChunk])
			d = w.Seal(index, f.sealed[k], ceilChunk)
		case f.mode.key != nil:
			d = w.Seal(index, f.msg, ceilChunk)
			copy(f.tags[k][:], f.msg[ceilChunk:])
		}
		f.st.Add(uint32(k+1), ceilChunk, d)
	}
	f.sum, f.tag = f.st.End(uint32(f.chunks+1), int64(f.chunks)*ceilChunk)
}

// Poll delivers the authentication, then data messages, one per credit,
// then, once every credit is back, the end message.
func (f *fakeSender) Poll(ctx context.Context, cs []conn.Completion) (int, error) {
	room := f.mode.room()
	for {
		n := 0
		for ; n < len(cs) && len(f.ctl) > 0; n++ {
			cs[n] = <-f.ctl
		}
		for len(f.returned) > 0 {
			f.have += <-f.returned
		}
		for ; n < len(cs) && f.have > 0 && int(f.seq) < f.chunks; n++ {
			i, err := f.next()
			if err != nil {
				return n, err
			}
			k := f.seq
			f.seq++
			f.have--
			switch {
			case f.mode.encrypt:
				f.recv[i] = f.sealed[k]
			case f.mode.key != nil:
				copy(f.recv[i][ceilChunk:], f.tags[k][:])
			}
			wire.PutTrailer(f.recv[i][ceilChunk+room:], wire.MsgData, f.seq)
			cs[n] = conn.Completion{Op: conn.OpRecv, Buf: i, Len: ceilChunk + room + conn.TrailerLen}
		}
		if n < len(cs) && int(f.seq) == f.chunks && f.have == f.credits && f.ended < 0 {
			c, err := f.end()
			if err != nil {
				return n, err
			}
			cs[n] = c
			n++
		}
		if n > 0 {
			return n, nil
		}
		select {
		case k := <-f.returned:
			f.have += k
		case c := <-f.ctl:
			cs[0] = c
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-f.closed:
			return 0, conn.ErrClosed
		}
	}
}

// next takes the data buffer due next.
func (f *fakeSender) next() (int, error) {
	select {
	case i := <-f.data:
		return i, nil
	default:
		return 0, errNoBuffer
	}
}

// end writes the end message into the next data buffer (its own memory
// again): the byte count, the checksum and, keyed, the stream tag, as
// prepare computed them.
func (f *fakeSender) end() (conn.Completion, error) {
	i, err := f.next()
	if err != nil {
		return conn.Completion{}, err
	}
	f.recv[i] = f.ring[i]
	body := binary.LittleEndian.AppendUint64(f.ring[i][:0], uint64(f.chunks)*ceilChunk)
	body = binary.LittleEndian.AppendUint64(body, f.sum)
	body = append(body, f.tag...)
	f.seq++
	wire.PutTrailer(f.ring[i][len(body):], wire.MsgEnd, f.seq)
	f.ended = i
	return conn.Completion{Op: conn.OpRecv, Buf: i, Len: len(body) + conn.TrailerLen}, nil
}

// confirmed checks the receiver's confirmation of the stream, as Send
// would: the byte count, the receivers it counts and, keyed, its MAC.
func (f *fakeSender) confirmed(receivers uint32) error {
	bytes := int64(f.chunks) * ceilChunk
	want := make([]byte, wire.DoneLen, wire.DoneLen+auth.MACLen)
	want[0] = wire.MsgDone
	binary.LittleEndian.PutUint64(want[1:], uint64(bytes))
	binary.LittleEndian.PutUint32(want[9:], receivers)
	want = append(want, f.st.Done(bytes, receivers, f.tag, nil)...)
	if !hmac.Equal(f.doneMsg, want) {
		return fmt.Errorf("fake sender: confirmation %s, want %s", wire.Describe(f.doneMsg), wire.Describe(want))
	}
	return nil
}

// PostRecv re-posts receive buffer i: a data buffer in the ring's order,
// or a spare.
func (f *fakeSender) PostRecv(i int) error {
	ch := f.data
	if i >= f.credits {
		ch = f.spares
	}
	select {
	case ch <- i:
		return nil
	default:
		return fmt.Errorf("fake sender: buffer %d posted twice", i)
	}
}

// PostSend is never called: a receiver sends control messages only.
func (f *fakeSender) PostSend(int, int) error {
	return errors.New("fake sender: a receiver has no send buffers")
}

func (f *fakeSender) SendBuf(int) []byte   { return nil }
func (f *fakeSender) RecvBuf(i int) []byte { return f.recv[i] }
func (f *fakeSender) SendBufs() int        { return 0 }
func (f *fakeSender) RecvBufs() int        { return len(f.recv) }
func (f *fakeSender) Info() conn.Info      { return ceilInfo }

// Close unblocks Poll; the buffers go when the benchmark ends.
func (f *fakeSender) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// benchMemcpy copies a 4 MiB buffer into another, in GOMAXPROCS loops at
// once (each with buffers of its own, made before the timer starts): at
// GOMAXPROCS 1 one core's copy bandwidth, at N what N cores copy together.
func benchMemcpy(b *testing.B) {
	pairs := make(chan [2][]byte, runtime.GOMAXPROCS(0))
	for range cap(pairs) {
		src, dst := ceilPayload(), make([]byte, ceilChunk)
		copy(dst, src)
		pairs <- [2][]byte{src, dst}
	}
	b.SetBytes(ceilChunk)
	cpu := cpuTime(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := <-pairs // RunParallel starts GOMAXPROCS goroutines
		for pb.Next() {
			copy(p[1], p[0])
		}
	})
	reportCPU(b, cpuTime(b)-cpu, ceilChunk)
}

// benchCat reads the file at path with read(2) into a 4 MiB buffer and
// drops it, as `cat < file > /dev/null` does (one reader, whatever
// GOMAXPROCS says).
func benchCat(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, ceilChunk)
	b.SetBytes(ceilStream)
	cpu := cpuTime(b)
	for b.Loop() {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			b.Fatal(err)
		}
		total := 0
		for {
			n, err := f.Read(buf)
			total += n
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if total != ceilStream {
			b.Fatalf("read %d bytes, want %d", total, ceilStream)
		}
	}
	reportCPU(b, cpuTime(b)-cpu, ceilStream)
}
