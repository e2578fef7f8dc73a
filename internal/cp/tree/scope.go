package tree

import (
	"archive/tar"
	"path"
	"slices"
	"strings"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
)

// An extraction writes only what was asked for (see internal/cp/plan/asked.go):
// every archive entry must lie under the top-level names the plan was
// checked for, before anything of it is written.

// underNames checks that name, an archive entry's (checked by entryName),
// lies under one of names, the top-level names asked for.
func underNames(name string, names []string) error {
	first, _, _ := strings.Cut(path.Clean(name), "/")
	if !slices.Contains(names, first) {
		return &proto.Unasked{Claim: name, Why: "outside the names asked for (" + strings.Join(names, ", ") + ")"}
	}
	return nil
}

// scope is what an archive may write, as asked for: entries under names,
// its top-level names, and with files (a download without -r) only regular
// files, each one of those names.
type scope struct {
	names []string
	files bool
}

// check checks h, an archive entry, against s, before anything of it is
// written.
func (s scope) check(h *tar.Header) error {
	if err := underNames(h.Name, s.names); err != nil {
		return err
	}
	switch {
	case !s.files:
	case h.Typeflag == tar.TypeDir || strings.Contains(path.Clean(h.Name), "/"):
		return &proto.Unasked{Claim: h.Name, Why: "a directory, or in one, without -r"}
	case h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeGNUSparse:
		return &proto.Unasked{Claim: h.Name, Why: "not a regular file, without -r"}
	}
	return nil
}
