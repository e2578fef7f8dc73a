package cp

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// protocolVersion is the version of the request and status lines. Both
// sides must speak the same one.
const protocolVersion = 2

// Bounds of what the remote side accepts in a request.
const (
	maxRequestLine = 64 << 10
	maxPathLen     = 4096
	maxNameLen     = 255
	maxTimeout     = 24 * time.Hour
	keyLen         = 32
)

// Modes of a copy.
const (
	modeFile   = "file"   // one regular file, streamed as is
	modeSparse = "sparse" // one regular file with holes, as in file mode but streamed as a tar archive of one sparse entry (see sparse.go)
	modeTar    = "tar"    // files and directories, streamed as a tar archive
)

// Request is what the local side tells the remote side before the
// stream: one JSON line on the ssh channel (never on a command line, so
// the key does not show in ps).
type Request struct {
	Version int    `json:"version"`
	Key     string `json:"key"`  // the one-time stream key, hex
	Dest    string `json:"dest"` // DST as the user wrote it
	Mode    string `json:"mode"` // modeFile, modeSparse or modeTar
	// Name is, in file mode (and in sparse mode, as everything said
	// here of file mode), the source's base name: the file's name in DST
	// when DST is a directory.
	Name string `json:"name,omitempty"`
	// Perm is, in file mode, the source's permission bits (with setuid,
	// setgid and sticky as in fs.FileMode).
	Perm uint32 `json:"perm,omitempty"`
	// Preserve asks, in file mode, for Perm, ATime and MTime exactly;
	// in tar mode, for the archive's modes exactly. Else modes lose the
	// umask, setuid and setgid (and sticky on files).
	Preserve bool  `json:"preserve,omitempty"`
	ATime    int64 `json:"atime,omitempty"` // Unix nanoseconds
	MTime    int64 `json:"mtime,omitempty"` // Unix nanoseconds
	// Single says, in tar mode, that the archive holds one top-level
	// entry, which becomes DST itself when DST does not exist (like
	// scp -r dir host:newname).
	Single bool `json:"single,omitempty"`
	// Listen is the address to listen on, an IP address: the local
	// side's --data-host, resolved there. Empty: the address the ssh
	// connection arrived on.
	Listen    string        `json:"listen,omitempty"`
	Transport string        `json:"transport"`
	Timeout   time.Duration `json:"timeout"`
	Verbose   bool          `json:"verbose,omitempty"`
}

// keyBytes returns the decoded key.
func (r Request) keyBytes() []byte {
	k, _ := hex.DecodeString(r.Key)
	return k
}

// writeRequest sends r as one line on w.
func writeRequest(w io.Writer, r Request) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// readRequest reads and checks one request line from br.
func readRequest(br *bufio.Reader) (Request, error) {
	line, err := readLine(br, maxRequestLine)
	if err != nil {
		return Request{}, err
	}
	var r Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Request{}, conn.Errorf(conn.KindUsage, "read request", "%v", err)
	}
	if err := r.validate(); err != nil {
		return Request{}, conn.Errorf(conn.KindUsage, "read request", "%v", err)
	}
	return r, nil
}

// validate checks every field of a request from the local side.
func (r Request) validate() error {
	if r.Version != protocolVersion {
		return fmt.Errorf("protocol version %d, this rdmacp speaks %d: install the same rdmacp on both hosts", r.Version, protocolVersion)
	}
	if k, err := hex.DecodeString(r.Key); err != nil || len(k) != keyLen {
		return errors.New("the key is not 32 bytes in hex")
	}
	if r.Dest == "" || len(r.Dest) > maxPathLen || strings.ContainsRune(r.Dest, 0) {
		return fmt.Errorf("destination %.64q: empty, too long or with a NUL byte", r.Dest)
	}
	switch r.Mode {
	case modeFile, modeSparse:
		if err := checkName(r.Name); err != nil {
			return err
		}
	case modeTar:
	default:
		return fmt.Errorf("mode %.16q: must be %q, %q or %q", r.Mode, modeFile, modeSparse, modeTar)
	}
	if r.Perm > 0o7777 {
		return fmt.Errorf("permissions %o: more than 07777", r.Perm)
	}
	if r.Listen != "" {
		if _, err := netip.ParseAddr(r.Listen); err != nil {
			return fmt.Errorf("listen address %.64q: %v", r.Listen, err)
		}
	}
	return checkSettings(r.Transport, r.Timeout)
}

// checkSettings checks a transport name and a timeout, as the local side's
// flags and the request to the remote side carry them.
func checkSettings(transport string, timeout time.Duration) error {
	switch transport {
	case "auto", "rdma", "tcp":
	default:
		return fmt.Errorf("transport %.16q: must be auto, rdma or tcp", transport)
	}
	if timeout < 0 || timeout > maxTimeout {
		return fmt.Errorf("timeout %v: must be 0 to %v", timeout, maxTimeout)
	}
	return nil
}

// checkName checks that name is one plain path element.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > maxNameLen || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("file name %.64q: not one plain path element", name)
	}
	return nil
}

// readLine reads one line of at most max bytes from br, without the
// newline.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > max {
			return nil, fmt.Errorf("line longer than %d bytes", max)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}
