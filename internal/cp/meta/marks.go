package meta

import (
	"errors"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// Marks are digests of what Flags keep of a file besides its data, mode
// and times, for the quick check of a repeated copy: its owner, group,
// ACLs and user.* xattrs, each XXH3-64 in hex, "" where not listed.
type Marks struct{ Owner, Group, ACLs, Xattrs string }

// Marker lists the Marks of a copy's entries on one side; it may be
// called from several goroutines at once.
type Marker struct {
	f      Flags
	owners bool        // this side lists owners and groups
	none   string      // the mark of no ACLs or xattrs
	byPath atomic.Bool // the kernel has no listxattrat: xattrs are listed by path
	users  sync.Map    // uint32 to string: the marks of the user ids met
	groups sync.Map    // uint32 to string: the marks of the group ids met
}

// NewMarker returns a Marker of what f keeps, for a side that receives
// if receiving, as root if root: a receiving side lists owners and groups
// only as root, the only side that sets them (else they are not compared).
// xattrs of other namespaces than user.* are not listed: either side may
// not read or set them (a receiver's file system adds security.* ones).
func NewMarker(f Flags, receiving, root bool) *Marker {
	return &Marker{f: f, owners: !receiving || root, none: digest(nil)}
}

// Lists says whether m lists any marks.
func (m *Marker) Lists() bool {
	return m.owners && (m.f.Owner || m.f.Group) || m.f.ACLs || m.f.Xattrs
}

// Marks returns the marks of the entry base in the directory dirfd, at
// path, which st describes, never following a link.
func (m *Marker) Marks(dirfd int, base, path string, st *unix.Stat_t) (Marks, error) {
	var k Marks
	if m.owners && m.f.Owner {
		k.Owner = m.owner(&m.users, st.Uid, true)
	}
	if m.owners && m.f.Group {
		k.Group = m.owner(&m.groups, st.Gid, false)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK || !m.f.ACLs && !m.f.Xattrs {
		return k, nil
	}
	names, err := m.listxattr(dirfd, base, path)
	if err != nil {
		return k, err
	}
	var acls, xattrs []byte
	for _, n := range names {
		acl := n == aclAccess || n == aclDefault
		if !(acl && m.f.ACLs || m.f.Xattrs && namespace(n) == "user") {
			continue
		}
		v, err := getxattr(path, n)
		if errors.Is(err, unix.ENODATA) {
			continue // gone since it was listed
		}
		if err != nil {
			return k, err
		}
		rec := append(append(append([]byte(n), 0), v...), 0)
		if acl {
			acls = append(acls, rec...)
		} else {
			xattrs = append(xattrs, rec...)
		}
	}
	if m.f.ACLs {
		k.ACLs = m.digest(acls)
	}
	if m.f.Xattrs {
		k.Xattrs = m.digest(xattrs)
	}
	return k, nil
}

// digest is the mark of b, that of none when it is empty.
func (m *Marker) digest(b []byte) string {
	if len(b) == 0 {
		return m.none
	}
	return digest(b)
}

// listxattr returns the names of the xattrs of base in dirfd, at path
// (see the function listxattr): by listxattrat (Linux 6.13), which spares
// the kernel a walk of the whole path, else by path.
func (m *Marker) listxattr(dirfd int, base, path string) ([]string, error) {
	if !m.byPath.Load() {
		names, err := listxattrAt(dirfd, base)
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) { // EPERM: a seccomp filter's
			return names, err
		}
		m.byPath.Store(true)
	}
	return listxattr(path)
}

// listxattrAt is listxattr of base in dirfd, by listxattrat.
func listxattrAt(dirfd int, base string) ([]string, error) {
	p, err := unix.BytePtrFromString(base)
	if err != nil {
		return nil, err
	}
	return xattrNames(func(b []byte) (int, error) {
		var at unsafe.Pointer
		if len(b) > 0 {
			at = unsafe.Pointer(&b[0])
		}
		n, _, e := unix.Syscall6(unix.SYS_LISTXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), unix.AT_SYMLINK_NOFOLLOW, uintptr(at), uintptr(len(b)), 0)
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	})
}

// owner returns the mark of the user (or group) id: of its name, as the
// archive carries it, unless --numeric-ids or it has none here; kept in
// cache once looked up, which several walkers read without a lock.
func (m *Marker) owner(cache *sync.Map, id uint32, isUser bool) string {
	if k, ok := cache.Load(id); ok {
		return k.(string)
	}
	s := "#" + strconv.FormatUint(uint64(id), 10)
	if !m.f.NumericIDs {
		var name string
		if isUser {
			if u, err := user.LookupId(s[1:]); err == nil {
				name = u.Username
			}
		} else if g, err := user.LookupGroupId(s[1:]); err == nil {
			name = g.Name
		}
		if name != "" && !strings.HasPrefix(name, "#") {
			s = name
		}
	}
	k, _ := cache.LoadOrStore(id, digest([]byte(s)))
	return k.(string)
}

// digest is the mark of b: its XXH3-64 in 16 hex digits.
func digest(b []byte) string {
	const digits = "0123456789abcdef"
	var m [16]byte
	for i, h := len(m)-1, xxh3.Hash(b); i >= 0; i, h = i-1, h>>4 {
		m[i] = digits[h&0xf]
	}
	return string(m[:])
}
