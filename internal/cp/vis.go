package cp

import (
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// visWriter passes the remote side's stderr on to a terminal with every
// byte that could control it (escape sequences, carriage returns,
// backspaces, invalid UTF-8) written as a \x escape, as OpenSSH's scp does
// since CVE-2019-6109 and -6110: a remote side cannot rewrite or hide what
// this side printed. Newlines and tabs pass, and so does a line's end that
// ssh writes as a carriage return and a newline, as a newline: a return
// just before the newline can overwrite nothing.
type visWriter struct {
	w    io.Writer
	part []byte // the start of a rune the last write cut off
}

func (v *visWriter) Write(p []byte) (int, error) {
	b := append(v.part, p...)
	var out []byte
	for len(b) > 0 {
		if !utf8.FullRune(b) && len(b) < utf8.UTFMax {
			break // the rest of the rune may come with the next write
		}
		r, n := utf8.DecodeRune(b)
		if r == '\r' && len(b) == 1 {
			break // a newline may come with the next write
		}
		switch {
		case r == '\r' && b[1] == '\n':
		case r == '\n' || r == '\t' || r != utf8.RuneError && unicode.IsPrint(r):
			out = append(out, b[:n]...)
		case r == utf8.RuneError && n == 1:
			out = fmt.Appendf(out, `\x%02x`, b[0])
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		b = b[n:]
	}
	v.part = append(v.part[:0], b...)
	if _, err := v.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes, escaped, what the last write left held back: a return
// that no newline followed, or the start of a rune cut off.
func (v *visWriter) Flush() error {
	var out []byte
	for _, c := range v.part {
		if c == '\r' {
			out = append(out, `\u000d`...)
		} else {
			out = fmt.Appendf(out, `\x%02x`, c)
		}
	}
	v.part = v.part[:0]
	_, err := v.w.Write(out)
	return err
}
