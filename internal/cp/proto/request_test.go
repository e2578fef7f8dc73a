package proto

import (
	"strings"
	"testing"
)

func TestForwardLine(t *testing.T) {
	key := strings.Repeat("cd", keyLen)
	cases := []struct {
		f  ForwardLine
		ok bool
	}{
		{ForwardLine{}, true},
		{ForwardLine{To: "10.0.0.2:4000", Key: key}, true},
		{ForwardLine{To: "[fe80::1]:4000", Key: key}, true},
		{ForwardLine{Key: key}, false},                        // a key for nobody
		{ForwardLine{To: "10.0.0.2:4000"}, false},             // no key
		{ForwardLine{To: "10.0.0.2:4000", Key: "cd"}, false},  // short key
		{ForwardLine{To: "evil.example:80", Key: key}, false}, // a name, looked up there
		{ForwardLine{To: "10.0.0.2", Key: key}, false},        // no port
		{ForwardLine{To: "10.0.0.2:4000 x", Key: key}, false}, // junk
		{ForwardLine{To: "10.0.0.2:99999", Key: key}, false},  // no such port
	}
	for _, tc := range cases {
		if err := tc.f.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok %v", tc.f, err, tc.ok)
		}
	}
}
