package cp

import (
	"fmt"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/cp/remote"
)

// Bounds of a copy to several hosts.
const (
	maxHosts    = 1024    // hosts in one copy
	maxHostFile = 1 << 20 // bytes of a --to-file
)

// parseHosts parses the hosts of --to and --to-file: each entry of lists
// holds [user@]HOST names separated by commas, spaces or newlines, where a
// # starts a comment that runs to the end of its line. Each host gets dst
// as its path. A host named twice, or none, is an error.
func parseHosts(lists []string, dst string) ([]remote.Target, error) {
	var ts []remote.Target
	seen := map[string]bool{}
	for _, list := range lists {
		for line := range strings.SplitSeq(list, "\n") {
			line, _, _ = strings.Cut(line, "#")
			for _, name := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }) {
				t, err := remote.ParseTarget(name + ":" + dst)
				if err != nil || t.Path != dst && dst != "" {
					return nil, fmt.Errorf("%q is not [user@]HOST", name)
				}
				if seen[t.SSHDest()] {
					return nil, fmt.Errorf("%s is named twice", t.SSHDest())
				}
				seen[t.SSHDest()] = true
				if ts = append(ts, t); len(ts) > maxHosts {
					return nil, fmt.Errorf("more than %d hosts", maxHosts)
				}
			}
		}
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("no host named")
	}
	return ts, nil
}
