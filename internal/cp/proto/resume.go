package proto

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Resuming a copy. A copy that fails keeps what it wrote of a file under
// its partial name (see internal/cp/tree/filesink.go): the receiving side
// then offers block hashes of that partial file (or, in a tree, of a file
// already in place) under a key derived from the copy's one-time key, and
// the sending side, which compares them with its own blocks, decides where
// that file's data starts: after the longest run of leading blocks that
// match. A file that is no prefix of the source costs one pass of hashing
// and is copied over whole; one that a receiver claims without holding it
// cannot pass the comparison. A single file's start travels on the ssh
// channel ("from"); in an archive each resumed entry carries its own (see
// internal/cp/tree/tarsend.go).

// Bounds of offers.
const (
	MinBlock    = 1 << 20 // the smallest block hashed
	MaxHashes   = 256     // the most blocks an offer lists
	TreeHashes  = 16      // the most blocks an offer in a tree lists
	hashLen     = 16      // bytes of each block's hash
	MaxOffers   = 1 << 16 // the most files a tree's resume offers
	resumeInfo  = "rdmacp resume v1"
	MaxOfferLen = 1 << 50   // the largest prefix offered
	hashBuf     = 256 << 10 // the buffer a block is read through
)

// OfferWait bounds each wait for the other side's part of a resume, which
// reads and hashes what it has, a partial copy of any size, or a tree of
// them: at a slow disk's speed, hours. The other side is authenticated (by
// ssh); its end, or the ssh session's, ends the wait sooner.
const OfferWait = 24 * time.Hour

// Offer is what the receiving side has of a file: the keyed hashes of its
// first Size bytes, in blocks of Block bytes (the last one may be short).
// Name is, in a tree, the file's name in the archive; End marks the end
// of a list of offers.
type Offer struct {
	Name   string   `json:"name,omitempty"`
	Block  int64    `json:"block,omitempty"`
	Size   int64    `json:"size,omitempty"`
	Hashes []string `json:"hashes,omitempty"`
	End    bool     `json:"end,omitempty"`
}

// Validate checks an offer from the peer.
func (o Offer) Validate() error {
	if o.End {
		if o.Name != "" || o.Block != 0 || o.Size != 0 || len(o.Hashes) != 0 {
			return errors.New("the end of the offers carries an offer")
		}
		return nil
	}
	if o.Name != "" {
		if err := CheckEntryName(o.Name); err != nil {
			return err
		}
	}
	if o.Block < MinBlock || o.Block%MinBlock != 0 || o.Block > MaxOfferLen {
		return fmt.Errorf("block size %d: must be a multiple of %d", o.Block, MinBlock)
	}
	if o.Size < 0 || o.Size > MaxOfferLen || (o.Size+o.Block-1)/o.Block != int64(len(o.Hashes)) {
		return fmt.Errorf("%d block hashes of %d bytes for %d bytes", len(o.Hashes), o.Block, o.Size)
	}
	if len(o.Hashes) > MaxHashes {
		return fmt.Errorf("%d block hashes: more than %d", len(o.Hashes), MaxHashes)
	}
	for _, h := range o.Hashes {
		if b, err := hex.DecodeString(h); err != nil || len(b) != hashLen {
			return fmt.Errorf("block hash %.40q: not %d bytes in hex", h, hashLen)
		}
	}
	return nil
}

// hashBlock is the block an offer for a partial file of size n hashes: at
// least MinBlock, and large enough for at most most blocks.
func hashBlock(n, most int64) int64 {
	b := (n + most - 1) / most
	return max(MinBlock, (b+MinBlock-1)/MinBlock*MinBlock)
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

// block returns the hash of the n bytes of block i (of size bytes) of f,
// or ok false if f holds less than that there. It reads through a buffer
// of hashBuf bytes, whatever size the peer's offer says: memory follows
// what f holds, not what the offer claims.
func (h *hasher) block(f *os.File, i, size, n int64) (sum []byte, ok bool, err error) {
	if h.buf == nil {
		h.buf = make([]byte, hashBuf)
	}
	m := hmac.New(sha256.New, h.key)
	var idx [8]byte
	binary.BigEndian.PutUint64(idx[:], uint64(i))
	m.Write(idx[:])
	got, err := io.CopyBuffer(m, io.NewSectionReader(f, i*size, n), h.buf)
	if err != nil || got < n {
		return nil, false, err
	}
	return m.Sum(nil)[:hashLen], true, nil
}

// MakeOffer hashes the first n bytes of f, offered as name, in at most
// most blocks.
func MakeOffer(f *os.File, n int64, key []byte, name string, most int64) (Offer, error) {
	o := Offer{Name: name, Block: hashBlock(n, most), Hashes: []string{}}
	h := newHasher(key)
	for i := int64(0); i*o.Block < n; i++ {
		sum, ok, err := h.block(f, i, o.Block, min(o.Block, n-i*o.Block))
		if err != nil {
			return Offer{}, fmt.Errorf("read the partial copy: %w", err)
		}
		if !ok {
			break
		}
		o.Hashes = append(o.Hashes, hex.EncodeToString(sum))
		o.Size = min(n, (i+1)*o.Block)
	}
	return o, nil
}

// ResumeAt compares o with the blocks of f, the source, and returns where
// the stream starts: the end of the leading blocks that match.
func ResumeAt(f *os.File, o Offer, key []byte) (int64, error) {
	h := newHasher(key)
	for i, want := range o.Hashes {
		at := int64(i) * o.Block
		sum, ok, err := h.block(f, int64(i), o.Block, min(o.Block, o.Size-at))
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", f.Name(), err)
		}
		w, _ := hex.DecodeString(want)
		if !ok || !hmac.Equal(sum, w) {
			return at, nil
		}
	}
	return o.Size, nil
}

// SeekResume moves in, the source, to where the stream starts after the
// offer o (see ResumeAt) and returns that place.
func SeekResume(in *os.File, o Offer, key []byte) (int64, error) {
	at, err := ResumeAt(in, o, key)
	if err == nil {
		_, err = in.Seek(at, io.SeekStart)
	}
	if err != nil {
		return 0, conn.Errorf(conn.KindAborted, "resume", "%v", err)
	}
	return at, nil
}

// FromLine is an upload's answer to a single file's offer, on the ssh
// channel: where the stream starts.
type FromLine struct {
	From int64 `json:"from"`
}

// ResumesAt says whether at is a start the sending side may choose after
// the offer o: a block's start within it, or its end.
func (o Offer) ResumesAt(at int64) bool {
	return at >= 0 && at <= o.Size && (at%o.Block == 0 || at == o.Size)
}
