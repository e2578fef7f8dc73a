package tree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
)

// Resuming a tree (see resume.go): the receiving side offers, for each
// regular file under the archive's top-level entries at the destination,
// its partial copy if it has one, else the file in place; the sender marks
// each entry it resumes with where its data starts, and extract goes on
// from the file offered for it.

// resumed is what a tree's receiving side offered for a resume: the files
// by name in the archive, and the bytes of them kept.
type resumed struct {
	offered map[string]string // name in the archive -> path under the root
	kept    int64
}

// Offers lists what the destination holds of the archive's regular files,
// named as in the archive, at most proto.MaxOffers; it keeps the list for the
// extraction, which resumes only those. It walks only the archive's
// top-level names as asked for, and never through a link in their place.
func (s *TarSink) Offers(key []byte) ([]proto.Offer, error) {
	found := map[string]string{} // name in the archive -> path under root
	for _, top := range s.names {
		local := top
		if s.top != "" {
			local = s.top
		}
		if fi, err := s.root.Lstat(local); err == nil && !fi.IsDir() && !fi.Mode().IsRegular() {
			continue // a link or special file: the extraction makes its own, nothing to resume
		}
		err := fs.WalkDir(s.root.FS(), local, func(p string, d fs.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist) && p == local:
				return fs.SkipAll
			case err != nil:
				return err
			case !d.Type().IsRegular():
				return nil
			}
			target, partial := partialOf(p)
			name := path.Join(top, strings.TrimPrefix(strings.TrimPrefix(target, local), "/"))
			prev, seen := found[name]
			switch {
			case !seen && len(found) == proto.MaxOffers:
				return fs.SkipAll
			case !seen, partial && prev == target: // a partial copy goes before the file in place
				found[name] = p
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("look for partial copies: %w", err)
		}
	}
	var list []proto.Offer
	for _, name := range slices.Sorted(maps.Keys(found)) {
		o, err := s.offerFile(found[name], name, key)
		if err != nil {
			return nil, err
		}
		list = append(list, o)
	}
	s.resumed = &resumed{offered: found}
	return list, nil
}

// offerFile hashes the file at p (under the root) for an offer named name.
func (s *TarSink) offerFile(p, name string, key []byte) (proto.Offer, error) {
	f, err := s.root.OpenFile(filepath.FromSlash(p), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return proto.Offer{}, fmt.Errorf("look for partial copies: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return proto.Offer{}, err
	}
	return proto.MakeOffer(f, fi.Size(), key, name, proto.TreeHashes)
}

// partialOf returns the file that p, a path in slash form, is a partial
// copy of (see partialName), or p itself and false if it is none.
func partialOf(p string) (string, bool) {
	dir, base := path.Split(p)
	i := strings.LastIndex(base, ".rdmacp-")
	if !strings.HasPrefix(base, ".") || !strings.HasSuffix(base, partialSuffix) || i < 2 {
		return p, false
	}
	return dir + base[1:i], true
}

// resume writes the entry h, which resumes the file name at the byte that
// at says, from the file offered for it: a partial copy, or the file in
// place, which first moves to its partial name so that a failure never
// leaves a partial file under the real name.
func (rr *resumed) resume(root *os.Root, name string, h *tar.Header, at string, data func(*os.File, int64) error, meta fileMeta) error {
	base, err := strconv.ParseInt(at, 10, 64)
	switch {
	case !rr.offers(h):
		return &proto.Unasked{Claim: h.Name, Why: "resumes a file this side did not offer"}
	case err != nil || base < 0 || base > proto.MaxOfferLen:
		return fmt.Errorf("archive entry %q: resumes at %.32q", h.Name, at)
	case isSparse(h):
		return fmt.Errorf("archive entry %q: a sparse entry cannot resume", h.Name)
	}
	partial := filepath.FromSlash(rr.offered[path.Clean(h.Name)])
	meta.version.Size += base
	if partial == name {
		partial = partialName(name, meta.version)
		if err := root.Rename(name, partial); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	f, err := openPartialIn(root, partial, 0o600, false)
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err != nil || fi.Size() < base {
		f.Close()
		return fmt.Errorf("archive entry %q resumes at byte %d of a shorter file", h.Name, base)
	}
	if err := f.Truncate(base); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	rr.kept += base
	return finishFile(spot{root: root, base: name, name: name}, f, partial, data(f, base), meta, false)
}

// offers says whether the file of entry h was offered for a resume.
func (rr *resumed) offers(h *tar.Header) bool {
	if rr == nil {
		return false
	}
	_, ok := rr.offered[path.Clean(h.Name)]
	return ok
}

// isSparse says whether h is a sparse entry.
func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// openPartialIn is openPartial for a partial file under root; with excl,
// the file must be new.
func openPartialIn(root *os.Root, name string, perm fs.FileMode, excl bool) (*os.File, error) {
	flag := os.O_RDWR | os.O_CREATE | syscall.O_NOFOLLOW
	if excl {
		flag |= os.O_EXCL
	}
	f, err := root.OpenFile(name, flag, perm)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return lockPartial(f)
}

// dropPartials removes the partial copies of name under root that no copy
// is writing, once name is complete.
func dropPartials(root *os.Root, name, keep string) {
	pattern := path.Join(path.Dir(filepath.ToSlash(name)), "."+globEscape(path.Base(filepath.ToSlash(name)))+".rdmacp-*"+partialSuffix)
	names, _ := fs.Glob(root.FS(), pattern)
	for _, p := range names {
		if p == keep {
			continue
		}
		if f, err := openPartialIn(root, filepath.FromSlash(p), 0, false); err == nil {
			root.Remove(filepath.FromSlash(p))
			f.Close()
		}
	}
}
