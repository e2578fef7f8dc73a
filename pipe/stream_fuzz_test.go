package pipe_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/memconn"
	"github.com/zeebo/xxh3"
)

// fuzzCfg keeps each fuzzed stream short: the honest end gives up quickly.
var fuzzCfg = pipe.ReceiveConfig{Timeout: 300 * time.Millisecond, HandshakeTimeout: 200 * time.Millisecond}

// fuzzSendCfg is fuzzCfg for the honest end that sends.
var fuzzSendCfg = pipe.SendConfig{Timeout: fuzzCfg.Timeout, HandshakeTimeout: fuzzCfg.HandshakeTimeout}

// splitMessages cuts b into messages: each is a length byte and that many
// bytes (what is left, if fewer).
func splitMessages(b []byte) [][]byte {
	var msgs [][]byte
	for len(b) > 0 {
		n := min(int(b[0]), len(b)-1)
		msgs = append(msgs, b[1:1+n])
		b = b[1+n:]
	}
	return msgs
}

// FuzzReceive plays arbitrary messages from a fake sender (after a valid
// handshake if the input says so) to an honest Receive: it must end, never
// panic, and succeed only with exactly the bytes the end message counts.
func FuzzReceive(f *testing.F) {
	data := binary.LittleEndian.AppendUint32([]byte("helloD\x00\x00\x00"), 1)
	end := binary.LittleEndian.AppendUint64(nil, 5)
	end = binary.LittleEndian.AppendUint64(end, xxh3.HashString("hello"))
	end = binary.LittleEndian.AppendUint32(append(end, 'E', 0, 0, 0), 2)
	f.Add(true, append(append([]byte{byte(len(data))}, data...), append([]byte{byte(len(end))}, end...)...))
	f.Add(false, []byte{3, 'B', 0, 0})
	f.Add(true, []byte{9, 3, 'A', 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, handshake bool, script []byte) {
		p := conn.NewParams(256, 4)
		sc, rc := memPair(t, p, p, memconn.Faults{})
		go func() {
			fake := &peer{t: t, c: sc, cs: make([]conn.Completion, 16)}
			if handshake {
				fake.handshake()
			}
			for i, m := range splitMessages(script) {
				fake.send(i%sc.SendBufs(), m)
			}
		}()
		var out bytes.Buffer
		done := make(chan error, 1)
		go func() {
			_, err := pipe.Receive(context.Background(), rc, &out, fuzzCfg)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil && out.Len() == 0 && !bytes.Contains(script, []byte{'E'}) {
				t.Errorf("the receiver succeeded without an end message")
			}
		case <-time.After(hostileBound):
			t.Fatal("the receiver hangs")
		}
	})
}

// FuzzSend plays arbitrary control messages from a fake receiver (after a
// valid hello and welcome if the input says so) to an honest Send: it must
// end, never panic, and never succeed, since no real confirmation comes.
func FuzzSend(f *testing.F) {
	f.Add(true, []byte{1, 1, 1, 3, 9, 'F', 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(false, []byte{34, 'H', 0})
	f.Add(true, []byte{5, 'A', 3, 'b', 'y', 'e'})
	f.Fuzz(func(t *testing.T, greet bool, script []byte) {
		p := conn.NewParams(256, 4)
		sc, rc := memPair(t, p, p, memconn.Faults{})
		go func() {
			fake := &peer{t: t, c: rc, cs: make([]conn.Completion, 16)}
			if greet {
				fake.greet()
			}
			for _, m := range splitMessages(script) {
				fake.control(m)
			}
		}()
		done := make(chan error, 1)
		go func() {
			_, err := pipe.Send(context.Background(), sc, io.LimitReader(zeros{}, 1000), fuzzSendCfg)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("the sender succeeded against a fake receiver")
			}
		case <-time.After(hostileBound):
			t.Fatal("the sender hangs")
		}
	})
}

// zeros is an endless input of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
