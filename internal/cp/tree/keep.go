package tree

import (
	"archive/tar"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
)

// keepEntry gives the entry name, which h has just put in place with
// mode, what ms keeps of it (see meta.Applier.Apply), and records whether
// a hard link may point to it (see meta.Applier.Wrote).
func keepEntry(ds *dirs, ms modes, name string, h *tar.Header, mode fs.FileMode) error {
	if ms.keep == nil {
		return nil
	}
	ms.keep.Wrote(name, h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeGNUSparse)
	if !ms.keep.Applies() {
		return nil
	}
	return inDir(ds, name, func(fd int, base string) error { return ms.keep.Apply(fd, base, name, h, mode) })
}

// inDir calls do with a descriptor of the directory of name, open in ds,
// and name's base there.
func inDir(ds *dirs, name string, do func(fd int, base string) error) error {
	d, err := ds.of(filepath.Dir(name))
	if err != nil {
		return err
	}
	if d.fd >= 0 {
		return do(d.fd, filepath.Base(name))
	}
	f, err := d.root.Open(".")
	if err != nil {
		return entryErr("open the directory of", name, err)
	}
	defer f.Close()
	return do(int(f.Fd()), filepath.Base(name))
}

// makeKept makes the entry h at name that only what ms keeps allows: a
// hard link (-H, see makeHardLink), a device or named pipe (-D, see
// makeSpecial); top is extract's. Any other entry fails.
func makeKept(root *os.Root, ds *dirs, name, top string, h *tar.Header, ms modes) error {
	switch {
	case ms.keep != nil && h.Typeflag == tar.TypeLink:
		return makeHardLink(root, name, top, h, ms.keep)
	case ms.keep != nil && (h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock || h.Typeflag == tar.TypeFifo):
		return makeSpecial(ds, name, h, ms)
	}
	return fmt.Errorf("archive entry %q: unsupported type %q", name, h.Typeflag)
}

// makeHardLink makes name a hard link to the file that the entry h links
// to, which must be a file this extraction wrote (see
// meta.Applier.LinkTarget), under a temporary name renamed into place
// (see clearWay).
func makeHardLink(root *os.Root, name, top string, h *tar.Header, keep *meta.Applier) error {
	target, err := entryName(h.Linkname, top)
	if err != nil {
		return err
	}
	if err := keep.LinkTarget(name, target); err != nil {
		return err
	}
	if err := clearWay(root, name, name); err != nil {
		return err
	}
	tmp, err := tempName(name)
	if err != nil {
		return err
	}
	if err := root.Link(target, tmp); err != nil {
		return entryErr("make hard link", name, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		root.Remove(tmp)
		return entryErr("make hard link", name, err)
	}
	keep.Wrote(name, true)
	return nil
}

// makeSpecial makes the device or named pipe of the entry h at name (see
// meta.Applier.Special), under a temporary name renamed into place over
// anything but a directory (a rename opens nothing), with its mode as ms
// says, its times and what ms keeps of it.
func makeSpecial(ds *dirs, name string, h *tar.Header, ms modes) error {
	if fi, err := ds.root.Lstat(name); err == nil && fi.IsDir() {
		return fmt.Errorf("%q is a directory: not replaced with a device or named pipe", name)
	}
	tmp, err := tempName(name)
	if err != nil {
		return err
	}
	mode := ms.of(h.FileInfo().Mode(), false)
	return inDir(ds, name, func(fd int, base string) error {
		made, err := ms.keep.Special(fd, filepath.Base(tmp), name, h, mode)
		if !made || err != nil {
			return err
		}
		ts := []unix.Timespec{timespec(orNow(h.AccessTime, h.ModTime)), timespec(h.ModTime)}
		err = unix.UtimesNanoAt(fd, filepath.Base(tmp), ts, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil {
			err = unix.Renameat(fd, filepath.Base(tmp), fd, base)
		}
		if err != nil {
			unix.Unlinkat(fd, filepath.Base(tmp), 0)
			return entryErr("make", name, err)
		}
		ms.keep.Wrote(name, false)
		return ms.keep.Apply(fd, base, name, h, mode)
	})
}

// keepDir gives the directory of d what keep keeps of it (see setDirs).
func keepDir(root *os.Root, d dirMeta, keep *meta.Applier) error {
	if !keep.Applies() {
		return nil
	}
	f, err := root.Open(filepath.Dir(d.name))
	if err != nil {
		return entryErr("open the directory of", d.name, err)
	}
	defer f.Close()
	return keep.Apply(int(f.Fd()), filepath.Base(d.name), d.name, d.hdr, d.mode)
}
