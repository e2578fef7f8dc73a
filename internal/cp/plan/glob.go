package plan

import (
	"path"
	"path/filepath"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/command"
	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/internal/cp/tree"
)

// A download's source whose last element has a wildcard (h0:dir/*.txt) is
// a pattern: the remote side expands it itself, with filepath.Glob and
// never through a shell, and the local side takes only names that the
// pattern matches, or the pattern itself (see takes and Asked.Check).
// As in OpenSSH's scp, a pattern that matches nothing names the file of
// that literal name (h0:'g[1]' copies g[1]), and a pattern's one match is
// copied as one source is (into a new DST name, it becomes DST).

// isPattern says whether src, a download's source as the user wrote it,
// is a pattern: its last element has *, ? or [.
func isPattern(src string) bool {
	return strings.ContainsAny(path.Base(src), "*?[")
}

// globMatch says whether name, a base name, matches pattern, a pattern's
// last element, as path.Match says, except that a leading dot is matched
// only by a leading dot, as in a shell (dir/* leaves dir/.ssh out).
func globMatch(pattern, name string) bool {
	if strings.HasPrefix(name, ".") && !strings.HasPrefix(pattern, ".") {
		return false
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

// takes says whether name, a base name the remote side sends, is one that
// pattern, a pattern's last element, asks for: a name it matches, or the
// pattern itself, which names the file of that name when it matches
// nothing (OpenSSH's scp takes it the same way in sink()).
func takes(pattern, name string) bool {
	return globMatch(pattern, name) || name == pattern
}

// Expand returns the local paths that srcs, a download's sources as the
// user wrote them, name on this side: each as is, or for a pattern, what it
// matches, in order (a pattern that matches nothing, or is malformed, stays
// as it is: the path of that literal name). from holds the index in srcs of
// each path's source.
func Expand(srcs []string) (paths []string, from []int, err error) {
	for i, src := range srcs {
		p := tree.ExpandHome(src)
		if !isPattern(src) {
			paths, from = append(paths, p), append(from, i)
			continue
		}
		matches, _ := filepath.Glob(p) // a malformed pattern (g[1) matches nothing
		n := 0
		for _, m := range matches {
			if globMatch(path.Base(src), filepath.Base(m)) {
				paths, from, n = append(paths, m), append(from, i), n+1
			}
		}
		if n == 0 {
			paths, from = append(paths, p), append(from, i)
		}
		if len(paths) > proto.MaxSources {
			return nil, nil, command.Usagef("%s: more than %d sources with what it matches", src, proto.MaxSources)
		}
	}
	return paths, from, nil
}

// Counts returns, for a download's plan p of the paths that Expand made
// from n sources, how many top-level names each source gave.
func (p Plan) Counts(from []int, n int) []int {
	c := make([]int, n)
	for _, s := range p.Srcs {
		c[from[s.arg]]++
	}
	return c
}
