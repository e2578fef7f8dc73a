package filter

import (
	"errors"
	"fmt"
	"strings"
)

// pattern is a compiled rsync pattern (see rsync(1), PATTERN MATCHING
// RULES): a sequence of tokens, matched by simulating them as an automaton,
// so that no pattern takes more than its length times the name's steps.
type pattern struct {
	toks []token
}

// Kinds of token.
const (
	tLit   = iota // one byte, c
	tAny          // ?: any byte but '/'
	tClass        // [...]: a byte of set
	tStar         // *: any run of bytes without '/'
	tStars        // ** (or more): any run of bytes
)

// token is one element of a pattern.
type token struct {
	kind int
	c    byte
	set  *[256]bool
}

// compile compiles s, a pattern without its anchoring '/' and trailing
// '/': literally unless wild, else with rsync's wildcards, where a
// backslash makes the next byte literal.
func compile(s string, wild bool) (pattern, error) {
	var p pattern
	for i := 0; i < len(s); i++ {
		t := token{kind: tLit, c: s[i]}
		switch {
		case !wild:
		case s[i] == '\\':
			if i+1 == len(s) {
				return pattern{}, errors.New("a backslash at the end")
			}
			i++
			t.c = s[i]
		case s[i] == '?':
			t.kind = tAny
		case s[i] == '*':
			t.kind = tStar
			for i+1 < len(s) && s[i+1] == '*' {
				i, t.kind = i+1, tStars
			}
		case s[i] == '[':
			set, end, err := compileClass(s, i+1)
			if err != nil {
				return pattern{}, err
			}
			t, i = token{kind: tClass, set: set}, end
		}
		p.toks = append(p.toks, t)
	}
	return p, nil
}

// compileClass compiles the character class of s that starts at i, just
// after its '[', as rsync's wildmatch reads it, and returns the index of
// its closing ']'.
func compileClass(s string, i int) (*[256]bool, int, error) {
	var set [256]bool
	negate := i < len(s) && (s[i] == '!' || s[i] == '^')
	if negate {
		i++
	}
	prev := -1 // the last byte that a '-' after it ranges from
	for first := true; ; first, i = false, i+1 {
		if i == len(s) {
			return nil, 0, errors.New("a [ without its ]")
		}
		ch := s[i]
		switch {
		case ch == ']' && !first:
			if negate {
				for b := range set {
					set[b] = !set[b]
				}
			}
			return &set, i, nil
		case ch == '\\':
			if i++; i == len(s) {
				return nil, 0, errors.New("a [ without its ]")
			}
			set[s[i]], prev = true, int(s[i])
		case ch == '-' && prev >= 0 && i+1 < len(s) && s[i+1] != ']':
			i++
			if s[i] == '\\' {
				if i++; i == len(s) {
					return nil, 0, errors.New("a [ without its ]")
				}
			}
			for b := prev; b <= int(s[i]); b++ {
				set[b] = true
			}
			prev = -1
		case ch == '[' && i+1 < len(s) && s[i+1] == ':':
			end := strings.IndexByte(s[i+2:], ']')
			if end < 0 {
				return nil, 0, errors.New("a [ without its ]")
			}
			name, ok := strings.CutSuffix(s[i+2:i+2+end], ":")
			if !ok {
				set['['], prev = true, '[' // not a [:class:]: a '[' in the set
				continue
			}
			in, known := classes[name]
			if !known {
				return nil, 0, fmt.Errorf("no character class [:%s:]", name)
			}
			for b := range set {
				set[b] = set[b] || in(byte(b))
			}
			i, prev = i+2+end, -1
		default:
			set[ch], prev = true, int(ch)
		}
	}
}

// classes are the POSIX character classes, of ASCII as in the C locale.
var classes = map[string]func(byte) bool{
	"alnum":  func(b byte) bool { return isAlpha(b) || isDigit(b) },
	"alpha":  isAlpha,
	"blank":  func(b byte) bool { return b == ' ' || b == '\t' },
	"cntrl":  func(b byte) bool { return b < ' ' || b == 0x7f },
	"digit":  isDigit,
	"graph":  func(b byte) bool { return b > ' ' && b < 0x7f },
	"lower":  func(b byte) bool { return b >= 'a' && b <= 'z' },
	"print":  func(b byte) bool { return b >= ' ' && b < 0x7f },
	"punct":  func(b byte) bool { return b > ' ' && b < 0x7f && !isAlpha(b) && !isDigit(b) },
	"space":  func(b byte) bool { return b == ' ' || b >= '\t' && b <= '\r' },
	"upper":  func(b byte) bool { return b >= 'A' && b <= 'Z' },
	"xdigit": func(b byte) bool { return isDigit(b) || b|0x20 >= 'a' && b|0x20 <= 'f' },
}

func isAlpha(b byte) bool { return b|0x20 >= 'a' && b|0x20 <= 'z' }
func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// match says whether p matches all of s.
func (p pattern) match(s string) bool {
	on := make([]bool, len(p.toks)+1)
	next := make([]bool, len(p.toks)+1)
	on[0] = true
	p.close(on)
	for i := 0; i < len(s); i++ {
		clear(next)
		alive := false
		for k, t := range p.toks {
			if !on[k] {
				continue
			}
			switch t.kind {
			case tStars:
				next[k] = true
			case tStar:
				next[k] = next[k] || s[i] != '/'
			case tLit:
				next[k+1] = next[k+1] || s[i] == t.c
			case tAny:
				next[k+1] = next[k+1] || s[i] != '/'
			case tClass:
				next[k+1] = next[k+1] || t.set[s[i]]
			}
			alive = alive || next[k] || next[k+1]
		}
		if !alive {
			return false
		}
		p.close(next)
		on, next = next, on
	}
	return on[len(p.toks)]
}

// close adds to the states on those that stars reach without a byte.
func (p pattern) close(on []bool) {
	for k, t := range p.toks {
		if on[k] && (t.kind == tStar || t.kind == tStars) {
			on[k+1] = true
		}
	}
}
