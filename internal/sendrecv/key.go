package sendrecv

import (
	"bytes"
	"fmt"
	"os"

	"github.com/rdmapipe/rdmapipe/internal/command"
)

// loadKey returns the shared secret from, in order of preference, the key
// file, the --key flag or the RDMAPIPE_KEY environment variable; nil if none
// is given. Giving more than one is a usage error, so that a user never
// authenticates with a key other than the one they meant.
func loadKey(file, flag, env string) ([]byte, error) {
	given := 0
	for _, s := range []string{file, flag, env} {
		if s != "" {
			given++
		}
	}
	if given > 1 {
		return nil, command.Usagef("give the key one way only: --key-file, --key or RDMAPIPE_KEY")
	}
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, command.Usagef("--key-file: %v", err)
		}
		b = bytes.TrimRight(b, "\r\n")
		if len(b) == 0 {
			return nil, command.Usagef("--key-file %s: the file is empty", file)
		}
		return b, nil
	case flag != "":
		return []byte(flag), nil
	case env != "":
		return []byte(env), nil
	}
	return nil, nil
}

// keyFileWarning returns a warning if the key file can be read or written
// by anyone but its owner, naming its mode, or "" if it cannot (or is not
// there: loadKey reports that).
func keyFileWarning(file string) string {
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return ""
	}
	return fmt.Sprintf("warning: the key file %s has mode %04o: others on this host may read the key; chmod 600 %s", file, fi.Mode().Perm(), file)
}
