// Package units formats byte counts for messages and summaries.
package units

import "fmt"

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
