package quick

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is a destination directory that entries are removed from, by
// names relative to it, never through a link nor outside it.
type Root struct {
	fd   int
	path string
}

// OpenRoot opens the directory at p (following a link there: it is the
// copy's destination, as named).
func OpenRoot(p string) (*Root, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return &Root{fd: fd, path: p}, nil
}

// Close closes r.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Remove removes the entry name (a checked name, see Listing) under r: a
// file, link or special file, or an empty directory. Each directory on its
// way is opened without following a link, so a link there fails the
// removal rather than lead elsewhere; a link itself is removed, not what
// it leads to.
func (r *Root) Remove(name string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("remove %s: %w", r.path, err)
	}
	dirs := strings.Split(name, "/")
	base := dirs[len(dirs)-1]
	fd, err := r.walk(dirs[:len(dirs)-1])
	if err != nil {
		return fmt.Errorf("remove %s/%s: %w", r.path, name, err)
	}
	if fd != r.fd {
		defer unix.Close(fd)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("remove %s/%s: %w", r.path, name, err)
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(fd, base, flags); err != nil {
		return fmt.Errorf("remove %s/%s: %w", r.path, name, err)
	}
	return nil
}

// walk opens the directories dirs under r one after the other, none
// through a link, and returns the last one's descriptor (r's for none).
func (r *Root) walk(dirs []string) (int, error) {
	fd := r.fd
	for _, d := range dirs {
		next, err := unix.Openat(fd, d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if fd != r.fd {
			unix.Close(fd)
		}
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%s is not a directory here (a link is not followed)", d)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}
