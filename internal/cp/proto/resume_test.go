package proto

import (
	"bytes"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestResumeAt checks where a stream resumes, for partial copies that are
// exact prefixes, damaged, or not of this source, and for the wrong key.
func TestResumeAt(t *testing.T) {
	const mib = 1 << 20
	src := make([]byte, 5*mib+123)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	key, other := bytes.Repeat([]byte{1}, keyLen), bytes.Repeat([]byte{2}, keyLen)
	damaged := func(at int) []byte {
		b := bytes.Clone(src[:4*mib])
		b[at] ^= 1
		return b
	}
	cases := []struct {
		name    string
		partial []byte
		key     []byte
		want    int64
	}{
		{"nothing", nil, key, 0},
		{"less than a block", src[:mib-1], key, mib - 1},
		{"one block", src[:mib], key, mib},
		{"two and a half blocks", src[:5*mib/2], key, 5 * mib / 2},
		{"whole file", src, key, 5*mib + 123},
		{"damaged in the third block", damaged(2*mib + 7), key, 2 * mib},
		{"damaged in the first byte", damaged(0), key, 0},
		{"hole in the middle", append(append(bytes.Clone(src[:mib]), make([]byte, mib)...), src[2*mib:3*mib]...), key, mib},
		{"longer than the source", append(bytes.Clone(src), make([]byte, 3*mib)...), key, 5 * mib},
		{"another key", src[:3*mib], other, 0},
	}
	dir := t.TempDir()
	in := testutil.WriteTemp(t, dir, "src", src)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testutil.WriteTemp(t, dir, strings.ReplaceAll(tc.name, " ", "_"), tc.partial)
			o, err := MakeOffer(p, int64(len(tc.partial)), tc.key, "", MaxHashes)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(); err != nil {
				t.Fatalf("own offer: %v", err)
			}
			got, err := ResumeAt(in, o, key)
			if err != nil || got != tc.want {
				t.Fatalf("resume at %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestHashBlock(t *testing.T) {
	for _, n := range []int64{0, 1, 1 << 20, 256 << 20, 256<<20 + 1, 1 << 40, 1<<50 - 1} {
		b := hashBlock(n, MaxHashes)
		if b < MinBlock || b%MinBlock != 0 || (n+b-1)/b > MaxHashes {
			t.Errorf("hashBlock(%d) = %d", n, b)
		}
		hashes := make([]string, (n+b-1)/b)
		for i := range hashes {
			hashes[i] = strings.Repeat("00", hashLen)
		}
		if err := (Offer{Block: b, Size: n, Hashes: hashes}).Validate(); err != nil {
			t.Errorf("hashBlock(%d) = %d: not a valid offer: %v", n, b, err)
		}
	}
}

// TestHugeBlockOffer: an offer of one block of 2^47 bytes (a hostile
// upload destination's) costs a read of what the source holds, through a
// small buffer, not an allocation of the block, and resumes nothing.
func TestHugeBlockOffer(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "src")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte("x"), 3<<20)); err != nil {
		t.Fatal(err)
	}
	o := Offer{Block: 1 << 47, Size: 1 << 47, Hashes: []string{strings.Repeat("00", hashLen)}}
	if err := o.Validate(); err != nil {
		t.Fatalf("the offer is well formed, but: %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	at, err := ResumeAt(f, o, bytes.Repeat([]byte{1}, keyLen))
	runtime.ReadMemStats(&after)
	if err != nil || at != 0 {
		t.Fatalf("resumeAt = %d, %v; want 0", at, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Fatalf("%d bytes allocated to hash a 3 MiB file", grew)
	}
}
