package cp

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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
	in := writeTemp(t, dir, "src", src)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeTemp(t, dir, strings.ReplaceAll(tc.name, " ", "_"), tc.partial)
			o, err := makeOffer(p, int64(len(tc.partial)), tc.key, "", maxHashes)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.validate(); err != nil {
				t.Fatalf("own offer: %v", err)
			}
			got, err := resumeAt(in, o, key)
			if err != nil || got != tc.want {
				t.Fatalf("resume at %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestHashBlock(t *testing.T) {
	for _, n := range []int64{0, 1, 1 << 20, 256 << 20, 256<<20 + 1, 1 << 40, 1<<50 - 1} {
		b := hashBlock(n, maxHashes)
		if b < minBlock || b%minBlock != 0 || (n+b-1)/b > maxHashes {
			t.Errorf("hashBlock(%d) = %d", n, b)
		}
		hashes := make([]string, (n+b-1)/b)
		for i := range hashes {
			hashes[i] = strings.Repeat("00", hashLen)
		}
		if err := (offer{Block: b, Size: n, Hashes: hashes}).validate(); err != nil {
			t.Errorf("hashBlock(%d) = %d: not a valid offer: %v", n, b, err)
		}
	}
}

// TestPartialFile follows a file sink's partial file: kept as an exact
// prefix when a stream fails, resumed by a copy of the same version of
// the source, removed for another version, locked against a second copy,
// and never opened through a planted link.
func TestPartialFile(t *testing.T) {
	dir := t.TempDir()
	req := Request{Dest: dir, Contents: Contents{Mode: modeFile, Name: "f", Perm: 0o644, Size: 10, Changed: 7}}
	s, err := newFileSink(req)
	if err != nil {
		t.Fatal(err)
	}
	s.Writer().Write([]byte("0123456789"))
	s.Abort(6) // six bytes were written in order
	if b, err := os.ReadFile(s.partial); err != nil || string(b) != "012345" {
		t.Fatalf("partial file: %q, %v; want the exact prefix", b, err)
	}

	req.Resume = true
	s, err = newFileSink(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newFileSink(req); err == nil || !strings.Contains(err.Error(), "another rdmacp is copying to it") {
		t.Fatalf("a second copy to the same file: %v", err)
	}
	o := offer{Block: minBlock, Size: 6}
	for _, at := range []int64{7, 4, -1} {
		if err := s.start(at, o); err == nil {
			t.Fatalf("started at %d of a 6-byte offer", at)
		}
	}
	if err := s.start(6, o); err != nil {
		t.Fatal(err)
	}
	s.Writer().Write([]byte("6789"))
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "0123456789" {
		t.Fatalf("resumed copy: %q, %v", b, err)
	}

	s, _ = newFileSink(req)
	s.Writer().Write([]byte("abc"))
	s.Abort(3)
	req.Changed = 8 // the source changed
	s, err = newFileSink(req)
	if err != nil || !s.stale {
		t.Fatalf("stale %v, %v; want the old partial file removed", s != nil && s.stale, err)
	}
	if o, _ := s.offer(bytes.Repeat([]byte{1}, keyLen)); len(o.Hashes) != 0 {
		t.Fatalf("offer %+v from a new partial file", o)
	}
	s.Abort(0)
	if m, _ := filepath.Glob(filepath.Join(dir, ".f.rdmacp-*")); len(m) != 0 {
		t.Fatalf("left behind: %v", m)
	}

	victim := writeTemp(t, dir, "victim", []byte("keep me"))
	if err := os.Link(victim.Name(), partialName(filepath.Join(dir, "f"), req.Contents)); err != nil {
		t.Fatal(err)
	}
	if _, err := newFileSink(req); err == nil || !strings.Contains(err.Error(), "one link") {
		t.Fatalf("partial name hard-linked elsewhere: %v", err)
	}
	if b, _ := os.ReadFile(victim.Name()); string(b) != "keep me" {
		t.Fatalf("the linked file was changed: %q", b)
	}
}

// writeTemp writes b to a new file name in dir and returns it open.
func writeTemp(t *testing.T, dir, name string, b []byte) *os.File {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
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
	o := offer{Block: 1 << 47, Size: 1 << 47, Hashes: []string{strings.Repeat("00", hashLen)}}
	if err := o.validate(); err != nil {
		t.Fatalf("the offer is well formed, but: %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	at, err := resumeAt(f, o, bytes.Repeat([]byte{1}, keyLen))
	runtime.ReadMemStats(&after)
	if err != nil || at != 0 {
		t.Fatalf("resumeAt = %d, %v; want 0", at, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Fatalf("%d bytes allocated to hash a 3 MiB file", grew)
	}
}
