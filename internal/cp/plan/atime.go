package plan

import (
	"io/fs"
	"syscall"
	"time"
)

// accessTime returns fi's access time, or its modification time where
// the system does not say.
func accessTime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Atim.Unix())
	}
	return fi.ModTime()
}
