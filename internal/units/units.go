// Package units formats byte counts for messages and summaries, and
// parses those that flags give.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size formats a byte count with a binary unit when it divides evenly
// ("4 MiB"), else in bytes ("1000 B").
func Size(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// MiBps is a rate in MiB/s, the unit of sizes: n bytes over seconds (0
// for no time). Every rate the commands print or write is in it.
func MiBps(n int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) / (1 << 20) / seconds
}

// ParseSize parses a byte count such as 65536, 64K, 64KiB, 1M, 1.5M or
// 2G: K, M, G and T are binary (1.5M is 1572864), and a fraction is
// rounded to the nearest byte.
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || strings.ContainsAny(t, "EINXP") || v < 0 || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%q is not a size (examples: 65536, 64K, 1.5M, 2G)", s)
	}
	return int64(math.Round(v * float64(mult))), nil
}
