package cp

import (
	"fmt"
	"strconv"
	"strings"
)

// portRange is the ports a listener may take (--data-ports), Lo to Hi;
// zero: any of the system's choice.
type portRange struct{ Lo, Hi int }

// parsePorts parses a port range, LO-HI or one port.
func parsePorts(s string) (portRange, error) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		hi = lo
	}
	l, err1 := strconv.Atoi(lo)
	h, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || l < 1 || h > 65535 || l > h {
		return portRange{}, fmt.Errorf("ports %.32q: want LO-HI (or one port), 1 <= LO <= HI <= 65535", s)
	}
	return portRange{l, h}, nil
}

// String is r as parsePorts takes it.
func (r portRange) String() string {
	if r == (portRange{}) {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}
