package pipe

import (
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/internal/wire"
)

// TestCheckAuthFlags checks which auth flags a receiver refuses, and how.
func TestCheckAuthFlags(t *testing.T) {
	t.Parallel()
	const key, chain, rejoin, probe, repair, encrypt = wire.FlagKey, wire.FlagChain, wire.FlagRejoin, wire.FlagProbe, wire.FlagRepair, wire.FlagEncrypt
	tests := []struct {
		name                    string
		flags                   byte
		haveKey, encrypts, rejo bool
		kind                    conn.Kind // 0: accepted
		says                    string
	}{
		{"plain", 0, false, false, false, 0, ""},
		{"keyed", key, true, false, false, 0, ""},
		{"no key presented", 0, true, false, false, conn.KindAuth, "presented no key"},
		{"a key this receiver lacks", key, false, false, false, conn.KindAuth, "this receiver has none"},
		{"encryption without a key", encrypt, false, false, false, conn.KindSetup, "encryption without a key"},
		{"not encrypted, required", key, true, true, false, conn.KindAuth, "accepts only encrypted streams"},
		{"a probe, encryption required", key | probe, true, true, false, 0, ""},
		{"encrypted, required", key | encrypt, true, true, false, 0, ""},
		{"a rejoin unasked", key | rejoin, true, false, false, conn.KindSetup, "has not begun"},
		{"repair without a chain: the last receiver", key | repair, true, false, false, 0, ""},
		{"repair without a key", chain | repair, false, false, false, conn.KindSetup, "without a key"},
		{"a repaired chain", key | chain | repair, true, false, false, 0, ""},
		{"a rejoin", key | rejoin, true, false, true, 0, ""},
		{"a new stream where a rejoin is due", key, true, false, true, conn.KindSetup, "taking no other"},
		{"a rejoin with a chain", key | rejoin | chain, true, false, true, conn.KindSetup, "taking no other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkAuthFlags(tt.flags, tt.haveKey, tt.encrypts, tt.rejo)
			switch {
			case tt.kind == 0 && err != nil:
				t.Errorf("refused: %v", err)
			case tt.kind != 0 && (conn.KindOf(err) != tt.kind || err == nil || !strings.Contains(err.Error(), tt.says)):
				t.Errorf("got %v, want a %v saying %q", err, tt.kind, tt.says)
			}
		})
	}
}

// TestLostReport checks the paging of lost messages: each after the first
// only once asked for, bounded, and only after the end of the stream.
func TestLostReport(t *testing.T) {
	t.Parallel()
	lost := func(more byte, names string) []byte { return append([]byte{wire.MsgLost, more}, names...) }
	tests := []struct {
		name  string
		msgs  [][]byte
		asked []bool // whether the sender asked for more before each
		ended bool
		says  string // the last message's error; "": all taken
		text  string
	}{
		{"one message", [][]byte{lost(0, "a\nb")}, []bool{false}, true, "", "a\nb"},
		{"two, asked", [][]byte{lost(1, "a\n"), lost(0, "b")}, []bool{false, true}, true, "", "a\nb"},
		{"before the end", [][]byte{lost(0, "a")}, []bool{false}, false, "before the end of the stream", ""},
		{"unasked", [][]byte{lost(1, "a\n"), lost(0, "b")}, []bool{false, false}, true, "without waiting for the sender", ""},
		{"after the last", [][]byte{lost(0, "a"), lost(0, "b")}, []bool{false, true}, true, "after its last lost message", ""},
		{"empty", [][]byte{{wire.MsgLost}}, []bool{false}, true, "empty, or more than", ""},
		{"too long", [][]byte{lost(0, strings.Repeat("x", wire.MaxLost+1))}, []bool{false}, true, "empty, or more than", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var l lostReport
			var err error
			for i, m := range tt.msgs {
				if tt.asked[i] && l.asks > 0 {
					l.asks--
				}
				if err = l.add(m, tt.ended); err != nil {
					break
				}
			}
			switch {
			case tt.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.says == "" && string(l.text) != tt.text:
				t.Errorf("text %q, want %q", l.text, tt.text)
			case tt.says != "" && (conn.KindOf(err) != conn.KindIntegrity || !strings.Contains(err.Error(), tt.says)):
				t.Errorf("got %v, want an integrity failure saying %q", err, tt.says)
			}
		})
	}
}
