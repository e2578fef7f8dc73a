package pipe

import (
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Stats describe a finished (or failed) stream.
type Stats struct {
	Bytes    int64 // payload bytes read (sender) or written (receiver)
	Messages int64 // data messages
	// Sum is, without a key, the stream's checksum: the xxHash64 of the
	// stream's identity and of each data message's sequence number,
	// length and XXH3, in order. With a key it is 0 (the stream's tag
	// authenticates it).
	Sum uint64
	// Integrity says how the data was protected: "xxh3" (a checksum,
	// without a key), "aes-gmac" (authenticated with the key) or
	// "aes-256-gcm" (encrypted and authenticated).
	Integrity string
	Elapsed   time.Duration // from the end of the handshake to the end of the stream
	// Began is, for a sender, whether it began to read its input (after
	// the handshake): a Send that failed with Began false read nothing,
	// so the same input may be sent again.
	Began bool
	Info  conn.Info // the connection's description
	// Receivers is, for a sender, how many receivers confirmed that they
	// wrote the whole stream: the one it sent to and every one down its
	// chain, counted hop by hop (and authenticated with a key).
	Receivers int
	// Lost names, for a sender or relay, the receivers down its chain
	// that were given up (see SendConfig.Repair), in the order they were,
	// with the receivers down the chain's own. The stream may still have
	// succeeded: every other receiver confirmed it.
	Lost []string
	// Behind is, for a receiver with ReceiveConfig.Lag, the most its
	// output was behind what it wrote to the lag, and Spilled the bytes that
	// went through the spill file.
	Behind, Spilled int64
	// Hosts is, for a sender with SendConfig.HostsEvery, the most each
	// host of the chain was reported behind in the reports that passed
	// their checks, and its spilled bytes (see Gauges.Hosts), by place.
	Hosts []HostLag
	// IO says how the input was read or the output written: "read" or
	// "write" as it comes, "pread" or "pwrite" for a regular file (several
	// at once), "pread O_DIRECT" or "pwrite O_DIRECT" where the file was
	// read or written around the cache, "pwrite sparse" with
	// ReceiveConfig.Sparse.
	IO string
}
