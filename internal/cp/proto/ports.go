package proto

import (
	"fmt"
	"strconv"
	"strings"
)

// PortRange is the ports a listener may take (--data-ports), Lo to Hi;
// zero: any of the system's choice.
type PortRange struct{ Lo, Hi int }

// ParsePorts parses a port range, LO-HI or one port.
func ParsePorts(s string) (PortRange, error) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		hi = lo
	}
	l, err1 := strconv.Atoi(lo)
	h, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || l < 1 || h > 65535 || l > h {
		return PortRange{}, fmt.Errorf("ports %.32q: want LO-HI (or one port), 1 <= LO <= HI <= 65535", s)
	}
	return PortRange{l, h}, nil
}

// String is r as ParsePorts takes it.
func (r PortRange) String() string {
	if r == (PortRange{}) {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}
