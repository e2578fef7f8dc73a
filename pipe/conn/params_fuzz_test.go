package conn

import (
	"bytes"
	"testing"
)

// FuzzParams feeds arbitrary bytes to Params.UnmarshalBinary: decoding
// never panics and fails exactly when the bytes are too short or lack the
// magic; what decodes encodes back to the same bytes (reserved bits
// cleared) and decodes again to the same Params; Validate and Negotiate
// never panic, and what Negotiate accepts is valid and within both sides'
// values.
func FuzzParams(f *testing.F) {
	for _, p := range []Params{NewParams(DefaultChunk, DefaultDepth), NewParams(MaxChunk+1, MaxDepth), {Version: Version, Chunk: 1, Depth: 3, Busy: true}, {}} {
		b, _ := p.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte("RDPP"))
	f.Add([]byte("RDPP\x02\x00\xff\xff\x00\x00\x10\x00\x04\x00\x00\x00trailing"))
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"))
	f.Add([]byte{})
	local := NewParams(DefaultChunk, DefaultDepth)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Params
		err := p.UnmarshalBinary(b)
		wellFormed := len(b) >= ParamsLen && bytes.Equal(b[:4], paramsMagic[:])
		if (err == nil) != wellFormed {
			t.Fatalf("UnmarshalBinary(%q): %v", b, err)
		}
		if err != nil {
			return
		}
		_ = p.Validate()
		out, err := p.MarshalBinary()
		if err != nil || len(out) != ParamsLen {
			t.Fatalf("MarshalBinary(%+v): %d bytes, %v", p, len(out), err)
		}
		want := bytes.Clone(b[:ParamsLen])
		want[6] &= paramsBusy
		want[7] = 0
		if !bytes.Equal(out, want) {
			t.Fatalf("%q decodes to %+v, which encodes to %q, want %q", b, p, out, want)
		}
		var q Params
		if err := q.UnmarshalBinary(out); err != nil || q != p {
			t.Fatalf("%+v encodes to %q, which decodes to %+v, %v", p, out, q, err)
		}
		n, err := Negotiate(local, p)
		if err != nil {
			if KindOf(err) != KindSetup {
				t.Fatalf("Negotiate(%+v): %v of kind %v", p, err, KindOf(err))
			}
			return
		}
		if n.Validate() != nil || n.Chunk > min(local.Chunk, p.Chunk) || n.Depth > min(local.Depth, p.Depth) || n.Busy {
			t.Fatalf("Negotiate(%+v) = %+v", p, n)
		}
	})
}
