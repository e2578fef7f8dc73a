package pipe

import (
	"runtime"

	"github.com/rdmapipe/rdmapipe/pipe/internal/seal"
)

// parallelMin returns the payload below which sealing a message of st is
// not worth a hand-over to a worker when nothing waits before it: the
// goroutine that takes the message seals it itself, which keeps a line
// typed into a stream from waking a worker on its way. Unkeyed, XXH3
// hashes a MiB in about the time of the two wake-ups a hand-over costs;
// GMAC and AES-GCM take several times longer per byte.
func parallelMin(st *seal.Stream) int {
	if st.Keyed() {
		return 128 << 10
	}
	return 1 << 20
}

// newSealers returns a seal.Worker for every goroutine that may seal or
// open a message at once: the pool's workers and the one that waits for
// a job.
func newSealers(st *seal.Stream) chan *seal.Worker {
	n := runtime.GOMAXPROCS(0) + 1
	ws := make(chan *seal.Worker, n)
	for range n {
		ws <- st.Worker()
	}
	return ws
}

// streamID is the identity of an unkeyed stream that its checksum starts
// with: the receiver's and the sender's nonces from the handshake.
func streamID(receiverNonce, senderNonce []byte) []byte {
	return append(append([]byte(nil), receiverNonce...), senderNonce...)
}
