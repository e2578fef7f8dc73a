package cp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// Resuming a file copy. A copy that fails keeps what it wrote under its
// partial name (see partialName): the receiving side then offers block
// hashes of that partial file under a key derived from the copy's
// one-time key, and the sending side, which compares them with its own
// blocks, says where the stream starts: after the longest run of leading
// blocks that match. A partial that is no prefix of the source costs one
// pass of hashing and is copied over whole; one that a receiver claims
// without holding it cannot pass the comparison.

// Bounds of an offer.
const (
	minBlock   = 1 << 20 // the smallest block hashed
	maxHashes  = 256     // the most blocks an offer lists
	hashLen    = 16      // bytes of each block's hash
	resumeInfo = "rdmacp resume v1"
)

// offer is what the receiving side has of a file: the keyed hashes of its
// first len(Hashes) blocks of Block bytes.
type offer struct {
	Block  int64    `json:"block"`
	Hashes []string `json:"hashes"`
}

// validate checks an offer from the peer.
func (o offer) validate() error {
	if o.Block < minBlock || o.Block%minBlock != 0 || o.Block > 1<<50 {
		return fmt.Errorf("block size %d: must be a multiple of %d", o.Block, minBlock)
	}
	if len(o.Hashes) > maxHashes {
		return fmt.Errorf("%d block hashes: more than %d", len(o.Hashes), maxHashes)
	}
	for _, h := range o.Hashes {
		if b, err := hex.DecodeString(h); err != nil || len(b) != hashLen {
			return fmt.Errorf("block hash %.40q: not %d bytes in hex", h, hashLen)
		}
	}
	return nil
}

// hashBlock is the block an offer for a partial file of size n hashes: at
// least minBlock, and large enough for at most maxHashes blocks.
func hashBlock(n int64) int64 {
	b := (n + maxHashes - 1) / maxHashes
	return max(minBlock, (b+minBlock-1)/minBlock*minBlock)
}

// hasher computes the keyed hashes of blocks.
type hasher struct {
	key []byte
	buf []byte
}

// newHasher returns a hasher under a key derived from the copy's key.
func newHasher(key []byte) *hasher {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(resumeInfo))
	return &hasher{key: m.Sum(nil)}
}

// block returns the hash of block i of f, of size bytes, or ok false if f
// holds less than that there.
func (h *hasher) block(f *os.File, i, size int64) (sum []byte, ok bool, err error) {
	if int64(cap(h.buf)) < size {
		h.buf = make([]byte, size)
	}
	b := h.buf[:size]
	if _, err := f.ReadAt(b, i*size); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, false, nil
		}
		return nil, false, err
	}
	m := hmac.New(sha256.New, h.key)
	var idx [8]byte
	binary.BigEndian.PutUint64(idx[:], uint64(i))
	m.Write(idx[:])
	m.Write(b)
	return m.Sum(nil)[:hashLen], true, nil
}

// makeOffer hashes the whole blocks of the first n bytes of f.
func makeOffer(f *os.File, n int64, key []byte) (offer, error) {
	o := offer{Block: hashBlock(n), Hashes: []string{}}
	h := newHasher(key)
	for i := range n / o.Block {
		sum, ok, err := h.block(f, i, o.Block)
		if err != nil {
			return offer{}, fmt.Errorf("read the partial copy: %w", err)
		}
		if !ok {
			break
		}
		o.Hashes = append(o.Hashes, hex.EncodeToString(sum))
	}
	return o, nil
}

// resumeAt compares o with the blocks of f, the source, and returns where
// the stream starts: the end of the leading blocks that match.
func resumeAt(f *os.File, o offer, key []byte) (int64, error) {
	h := newHasher(key)
	for i, want := range o.Hashes {
		sum, ok, err := h.block(f, int64(i), o.Block)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", f.Name(), err)
		}
		w, _ := hex.DecodeString(want)
		if !ok || !hmac.Equal(sum, w) {
			return int64(i) * o.Block, nil
		}
	}
	return int64(len(o.Hashes)) * o.Block, nil
}
