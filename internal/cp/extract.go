package cp

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// dirMeta is a directory's mode and times, set once its contents are in.
type dirMeta struct {
	name         string
	mode         fs.FileMode
	atime, mtime time.Time
}

// extract writes the tar archive read from r into root, treating it as
// hostile: entry names must be relative and free of "..", and every file
// operation goes through root, which refuses to resolve a path (or a
// symbolic link on it) to anywhere outside. Regular files, directories and
// symbolic links are created with the archive's permission bits and
// modification times; any other entry type fails the extraction. If top is
// not empty, the first element of every name is replaced with it.
//
// Existing files and links in the way are replaced; existing directories
// are kept and merged into. Directory modes and times are set at the end,
// deepest first, so that read-only directories can still be filled.
func extract(root *os.Root, r io.Reader, top string) error {
	tr := tar.NewReader(r)
	var dirs []dirMeta
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name, err := entryName(h.Name, top)
		if err != nil {
			return err
		}
		mode := h.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := makeDir(root, name); err != nil {
				return err
			}
			dirs = append(dirs, dirMeta{name, mode, h.AccessTime, h.ModTime})
		case tar.TypeReg:
			if err := writeFile(root, name, tr, mode, h.AccessTime, h.ModTime); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := makeLink(root, name, h.Linkname); err != nil {
				return err
			}
		default:
			return fmt.Errorf("archive entry %q: unsupported type %q", name, h.Typeflag)
		}
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
		if err := root.Chtimes(d.name, orNow(d.atime, d.mtime), d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// entryName checks an archive entry's name and returns it as a local
// relative path, with its first element replaced by top if top is set.
func entryName(name, top string) (string, error) {
	if name == "" || len(name) > maxPathLen || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("archive entry %.64q: empty, too long or with a NUL byte", name)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("archive entry %q: absolute path refused", name)
	}
	if slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("archive entry %q: '..' refused", name)
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", fmt.Errorf("archive entry %q: names no file", name)
	}
	if top != "" {
		_, rest, _ := strings.Cut(clean, "/")
		clean = path.Join(top, rest)
	}
	return filepath.FromSlash(clean), nil
}

// makeDir makes directory name, or keeps it if it exists (as a real
// directory, not a link to one).
func makeDir(root *os.Root, name string) error {
	err := root.Mkdir(name, 0o700)
	if err == nil {
		return nil
	}
	if fi, lerr := root.Lstat(name); lerr == nil && fi.IsDir() {
		return nil
	}
	return fmt.Errorf("make directory: %w", err)
}

// writeFile writes the file name from r, replacing a file or link in the
// way, and sets its mode and times.
func writeFile(root *os.Root, name string, r io.Reader, mode fs.FileMode, atime, mtime time.Time) error {
	if err := clearWay(root, name); err != nil {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create file: %w", err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := root.Chmod(name, mode); err != nil {
		return err
	}
	return root.Chtimes(name, orNow(atime, mtime), mtime)
}

// makeLink makes the symbolic link name pointing to target, replacing a
// file or link in the way. The target is stored as it came: a link may
// point anywhere, but nothing is ever written through one that leads out
// of the root.
func makeLink(root *os.Root, name, target string) error {
	if target == "" || len(target) > maxPathLen || strings.ContainsRune(target, 0) {
		return fmt.Errorf("archive entry %q: link target empty, too long or with a NUL byte", name)
	}
	if err := clearWay(root, name); err != nil {
		return err
	}
	if err := root.Symlink(target, name); err != nil {
		return fmt.Errorf("make link: %w", err)
	}
	return nil
}

// clearWay removes what is at name unless it is a directory (which
// the create that follows then fails on).
func clearWay(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if err != nil || fi.IsDir() {
		return nil
	}
	if err := root.Remove(name); err != nil {
		return fmt.Errorf("replace existing: %w", err)
	}
	return nil
}

// orNow returns t, or fallback when t is unset (an archive without access
// times).
func orNow(t, fallback time.Time) time.Time {
	if t.IsZero() {
		return fallback
	}
	return t
}
