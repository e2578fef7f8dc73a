package auth

import (
	"bytes"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestProof checks that a proof verifies only with the same key, label,
// transcript and additions.
func TestProof(t *testing.T) {
	key, other := []byte("key"), []byte("kez")
	tr := Transcript(conn.Info{Chunk: 4096, Depth: 4}, []byte("hello"), 5, []byte("nonce"), []byte("stream"), 2, []string{"h2"})
	p := Proof(key, SenderProof, tr, []byte("window"))
	cases := []struct {
		name  string
		key   []byte
		label string
		t     []byte
		more  []byte
		valid bool
	}{
		{"same", key, SenderProof, tr, []byte("window"), true},
		{"other key", other, SenderProof, tr, []byte("window"), false},
		{"other peer's label", key, ReceiverProof, tr, []byte("window"), false},
		{"other chain", key, SenderProof, Transcript(conn.Info{Chunk: 4096, Depth: 4}, []byte("hello"), 5, []byte("nonce"), []byte("stream"), 2, nil), []byte("window"), false},
		{"other chunk", key, SenderProof, Transcript(conn.Info{Chunk: 8192, Depth: 4}, []byte("hello"), 5, []byte("nonce"), []byte("stream"), 2, []string{"h2"}), []byte("window"), false},
		{"other stream", key, SenderProof, Transcript(conn.Info{Chunk: 4096, Depth: 4}, []byte("hello"), 5, []byte("nonce"), []byte("streaN"), 2, []string{"h2"}), []byte("window"), false},
		{"other place", key, SenderProof, Transcript(conn.Info{Chunk: 4096, Depth: 4}, []byte("hello"), 5, []byte("nonce"), []byte("stream"), 3, []string{"h2"}), []byte("window"), false},
		{"other window", key, SenderProof, tr, []byte("windov"), false},
	}
	for _, tc := range cases {
		if got := ValidProof(tc.key, tc.label, tc.t, p, tc.more); got != tc.valid {
			t.Errorf("%s: ValidProof = %v, want %v", tc.name, got, tc.valid)
		}
	}
}

// TestStreamMAC checks that a stream's tag binds every message's sequence
// number, length and tag, their order and the end, and that the
// confirmation binds the bytes written and the receivers. (Package seal
// tests the payloads' tags.)
func TestStreamMAC(t *testing.T) {
	type msg struct {
		seq uint32
		n   int
		tag string
	}
	tag := func(key string, msgs []msg, end uint32, bytes int64) []byte {
		m := NewStreamMAC(StreamKey([]byte(key), []byte("transcript")), false)
		for _, x := range msgs {
			m.Add(x.seq, x.n, []byte(x.tag))
		}
		return m.End(end, bytes, 42)
	}
	orig := []msg{{1, 2, "ab"}, {2, 2, "cd"}}
	want := tag("k", orig, 3, 4)
	cases := []struct {
		name string
		got  []byte
	}{
		{"other key", tag("j", orig, 3, 4)},
		{"reordered", tag("k", []msg{{2, 2, "cd"}, {1, 2, "ab"}}, 3, 4)},
		{"tag changed", tag("k", []msg{{1, 2, "ab"}, {2, 2, "ce"}}, 3, 4)},
		{"bytes moved between messages", tag("k", []msg{{1, 3, "ab"}, {2, 1, "cd"}}, 3, 4)},
		{"truncated", tag("k", []msg{{1, 2, "ab"}}, 2, 2)},
		{"other end", tag("k", orig, 4, 4)},
	}
	if !bytes.Equal(want, tag("k", orig, 3, 4)) {
		t.Fatal("the same stream gave two tags")
	}
	for _, tc := range cases {
		if bytes.Equal(tc.got, want) {
			t.Errorf("%s: same tag as the original stream", tc.name)
		}
	}
	m := NewStreamMAC(StreamKey([]byte("k"), []byte("transcript")), false)
	if bytes.Equal(m.Done(4, 1, want, nil), m.Done(4, 2, want, nil)) || bytes.Equal(m.Done(4, 1, want, nil), m.Done(3, 1, want, nil)) || bytes.Equal(m.Done(4, 1, want, nil), m.Done(4, 1, want, []byte("h"))) {
		t.Error("the confirmation does not bind the receivers, bytes and lost hosts")
	}
	gmac, enc := m.payloadKey, NewStreamMAC(StreamKey([]byte("k"), []byte("transcript")), true).payloadKey
	if bytes.Equal(gmac, enc) {
		t.Error("encryption and GMAC share a payload key")
	}
}
