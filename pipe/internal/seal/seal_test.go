package seal

import (
	"bytes"
	"testing"
)

// TestOpen checks that what Seal does, Open undoes and accepts, in each
// mode, and that with a key Open refuses every change: to the payload, to
// the tag, and a message opened as another (its index) or under another
// stream's key.
func TestOpen(t *testing.T) {
	plain := bytes.Repeat([]byte("payload "), 100)
	modes := []struct {
		name string
		new  func(key string) *Stream
	}{
		{"unkeyed", func(string) *Stream { return New([]byte("id")) }},
		{"keyed", func(key string) *Stream { return NewKeyed([]byte(key), false) }},
		{"encrypted", func(key string) *Stream { return NewKeyed([]byte(key), true) }},
	}
	for _, m := range modes {
		st := m.new("key")
		sealed := make([]byte, len(plain)+TagLen)
		copy(sealed, plain)
		d := st.Worker().Seal(7, sealed, len(plain))
		if got := bytes.Equal(sealed[:len(plain)], plain); got == st.Encrypted() {
			t.Errorf("%s: payload left as it was: %v", m.name, got)
		}
		open := func(st *Stream, index uint64, change func(b []byte)) (Digest, bool, []byte) {
			b := bytes.Clone(sealed)
			change(b)
			d, ok := st.Worker().Open(index, b, len(plain))
			return d, ok, b[:len(plain)]
		}
		got, ok, p := open(st, 7, func([]byte) {})
		if !ok || got != d || !bytes.Equal(p, plain) {
			t.Errorf("%s: Open(Seal) = %v, same digest %v, same payload %v", m.name, ok, got == d, bytes.Equal(p, plain))
		}
		if !st.Keyed() {
			if got, _, _ := open(st, 7, func(b []byte) { b[3] ^= 1 }); got == d {
				t.Errorf("%s: a changed payload has the same digest", m.name)
			}
			continue
		}
		cases := []struct {
			name   string
			st     *Stream
			index  uint64
			change func(b []byte)
		}{
			{"payload changed", st, 7, func(b []byte) { b[3] ^= 1 }},
			{"tag changed", st, 7, func(b []byte) { b[len(plain)] ^= 1 }},
			{"other index", st, 8, func([]byte) {}},
			{"other stream", m.new("other key"), 7, func([]byte) {}},
		}
		for _, tc := range cases {
			if _, ok, p := open(tc.st, tc.index, tc.change); ok || st.Encrypted() && bytes.Equal(p, plain) {
				t.Errorf("%s, %s: accepted %v, decrypted %v", m.name, tc.name, ok, bytes.Equal(p, plain))
			}
		}
	}
}

// TestEnd checks that the end of an unkeyed stream binds its identity and
// every message's sequence number, length and digest in order.
func TestEnd(t *testing.T) {
	type msg struct {
		seq  uint32
		data string
	}
	sum := func(id string, msgs []msg) uint64 {
		st := New([]byte(id))
		w := st.Worker()
		for _, m := range msgs {
			st.Add(m.seq, len(m.data), w.Seal(uint64(m.seq), []byte(m.data), len(m.data)))
		}
		s, tag := st.End(uint32(len(msgs)+1), 0)
		if tag != nil {
			t.Fatal("an unkeyed stream has a tag")
		}
		return s
	}
	orig := []msg{{1, "ab"}, {2, "cd"}}
	want := sum("id", orig)
	cases := []struct {
		name string
		got  uint64
	}{
		{"other stream", sum("di", orig)},
		{"reordered", sum("id", []msg{{1, "cd"}, {2, "ab"}})},
		{"renumbered", sum("id", []msg{{2, "ab"}, {1, "cd"}})},
		{"bytes moved between messages", sum("id", []msg{{1, "abc"}, {2, "d"}})},
		{"truncated", sum("id", orig[:1])},
		{"payload changed", sum("id", []msg{{1, "ab"}, {2, "ce"}})},
	}
	if want != sum("id", orig) {
		t.Fatal("the same stream gave two sums")
	}
	for _, tc := range cases {
		if tc.got == want {
			t.Errorf("%s: same sum as the original stream", tc.name)
		}
	}
}

// FuzzOpen feeds Open what a hostile peer may send: a keyed message whose
// payload, tag and index are anything. Open must accept exactly what Seal
// made for that index and never decrypt a message it refuses (it may
// clear it).
func FuzzOpen(f *testing.F) {
	f.Add([]byte("payload"), uint64(1), uint64(1), 0, true)
	f.Add([]byte(""), uint64(1), uint64(2), 3, false)
	f.Fuzz(func(t *testing.T, payload []byte, sealAt, openAt uint64, flip int, encrypt bool) {
		st := NewKeyed([]byte("stream key"), encrypt)
		m := make([]byte, len(payload)+TagLen)
		copy(m, payload)
		st.Worker().Seal(sealAt, m, len(payload))
		changed := flip >= 0 && flip < 8*len(m)
		if changed {
			m[flip/8] ^= 1 << (flip % 8)
		}
		sent := bytes.Clone(m)
		_, ok := st.Worker().Open(openAt, m, len(payload))
		if want := sealAt == openAt && !changed; ok != want {
			t.Fatalf("Open accepted %v, want %v (sealed at %d, opened at %d, bit %d flipped: %v)", ok, want, sealAt, openAt, flip, changed)
		}
		if n := len(payload); !ok && !bytes.Equal(m[:n], sent[:n]) && !bytes.Equal(m[:n], make([]byte, n)) {
			t.Fatal("Open turned a message it refused into something other than what was sent or zeros")
		}
		if ok && !bytes.Equal(m[:len(payload)], payload) {
			t.Fatal("Open accepted a message and did not restore its payload")
		}
	})
}
