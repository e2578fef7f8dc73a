package proto

import "testing"

func TestParsePorts(t *testing.T) {
	for s, want := range map[string]PortRange{"5000-5010": {5000, 5010}, "5000": {5000, 5000}, "1-65535": {1, 65535}} {
		if got, err := ParsePorts(s); err != nil || got != want {
			t.Errorf("parsePorts(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0-10", "10-5", "1-65536", "a-b", "5000-", "-5000", "1-2-3"} {
		if _, err := ParsePorts(s); err == nil {
			t.Errorf("parsePorts(%q): no error", s)
		}
	}
}
