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
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Resuming a copy. A copy that fails keeps what it wrote of a file under
// its partial name (see partialName): the receiving side then offers block
// hashes of that partial file (or, in a tree, of a file already in place)
// under a key derived from the copy's one-time key, and the sending side,
// which compares them with its own blocks, decides where that file's data
// starts: after the longest run of leading blocks that match. A file that
// is no prefix of the source costs one pass of hashing and is copied over
// whole; one that a receiver claims without holding it cannot pass the
// comparison. A single file's start travels on the ssh channel ("from");
// in an archive each resumed entry carries its own (resumeRecord).

// Bounds of offers.
const (
	minBlock    = 1 << 20 // the smallest block hashed
	maxHashes   = 256     // the most blocks an offer lists
	treeHashes  = 16      // the most blocks an offer in a tree lists
	hashLen     = 16      // bytes of each block's hash
	maxOffers   = 1 << 16 // the most files a tree's resume offers
	resumeInfo  = "rdmacp resume v1"
	maxOfferLen = 1 << 50   // the largest prefix offered
	hashBuf     = 256 << 10 // the buffer a block is read through
)

// offerWait bounds each wait for the other side's part of a resume, which
// reads and hashes what it has, a partial copy of any size, or a tree of
// them: at a slow disk's speed, hours. The other side is authenticated (by
// ssh); its end, or the ssh session's, ends the wait sooner.
const offerWait = 24 * time.Hour

// offer is what the receiving side has of a file: the keyed hashes of its
// first Size bytes, in blocks of Block bytes (the last one may be short).
// Name is, in a tree, the file's name in the archive; End marks the end
// of a list of offers.
type offer struct {
	Name   string   `json:"name,omitempty"`
	Block  int64    `json:"block,omitempty"`
	Size   int64    `json:"size,omitempty"`
	Hashes []string `json:"hashes,omitempty"`
	End    bool     `json:"end,omitempty"`
}

// validate checks an offer from the peer.
func (o offer) validate() error {
	if o.End {
		if o.Name != "" || o.Block != 0 || o.Size != 0 || len(o.Hashes) != 0 {
			return errors.New("the end of the offers carries an offer")
		}
		return nil
	}
	if o.Name != "" {
		if err := checkEntryName(o.Name); err != nil {
			return err
		}
	}
	if o.Block < minBlock || o.Block%minBlock != 0 || o.Block > maxOfferLen {
		return fmt.Errorf("block size %d: must be a multiple of %d", o.Block, minBlock)
	}
	if o.Size < 0 || o.Size > maxOfferLen || (o.Size+o.Block-1)/o.Block != int64(len(o.Hashes)) {
		return fmt.Errorf("%d block hashes of %d bytes for %d bytes", len(o.Hashes), o.Block, o.Size)
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
// least minBlock, and large enough for at most most blocks.
func hashBlock(n, most int64) int64 {
	b := (n + most - 1) / most
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

// makeOffer hashes the first n bytes of f, offered as name, in at most
// most blocks.
func makeOffer(f *os.File, n int64, key []byte, name string, most int64) (offer, error) {
	o := offer{Name: name, Block: hashBlock(n, most), Hashes: []string{}}
	h := newHasher(key)
	for i := int64(0); i*o.Block < n; i++ {
		sum, ok, err := h.block(f, i, o.Block, min(o.Block, n-i*o.Block))
		if err != nil {
			return offer{}, fmt.Errorf("read the partial copy: %w", err)
		}
		if !ok {
			break
		}
		o.Hashes = append(o.Hashes, hex.EncodeToString(sum))
		o.Size = min(n, (i+1)*o.Block)
	}
	return o, nil
}

// resumeAt compares o with the blocks of f, the source, and returns where
// the stream starts: the end of the leading blocks that match.
func resumeAt(f *os.File, o offer, key []byte) (int64, error) {
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

// seekResume moves in, the source, to where the stream starts after the
// offer o (see resumeAt) and returns that place.
func seekResume(in *os.File, o offer, key []byte) (int64, error) {
	at, err := resumeAt(in, o, key)
	if err == nil {
		_, err = in.Seek(at, io.SeekStart)
	}
	if err != nil {
		return 0, conn.Errorf(conn.KindAborted, "resume", "%v", err)
	}
	return at, nil
}

// fromLine is an upload's answer to a single file's offer, on the ssh
// channel: where the stream starts.
type fromLine struct {
	From int64 `json:"from"`
}

// resumesAt says whether at is a start the sending side may choose after
// the offer o: a block's start within it, or its end.
func (o offer) resumesAt(at int64) bool {
	return at >= 0 && at <= o.Size && (at%o.Block == 0 || at == o.Size)
}
