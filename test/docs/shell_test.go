package docs

import (
	"fmt"
	"strings"
)

// A command is one simple command of an example line: its words after
// any VAR=value assignments, without redirections.
type command struct {
	name string
	args []string
}

// operators end a simple command; redirections take the next word.
var (
	operators    = []string{"||", "&&", "|", ";", "&", "(", ")"}
	redirections = []string{"2>&1", "1<>", "2>", ">>", ">", "<"}
)

// commands splits a line of shell into its simple commands, as far as
// the examples need: quotes, $(...) and <(...) stay inside their word, a
// word starting with # starts a comment.
func commands(line string) ([]command, error) {
	words, err := split(line)
	if err != nil {
		return nil, err
	}
	var out []command
	var cur *command
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case isOne(w, operators):
			cur = nil
		case isOne(w, redirections):
			i++ // its target
		case cur == nil && strings.Contains(w, "=") && !strings.HasPrefix(w, "-"):
			// an assignment before the command
		case cur == nil:
			out = append(out, command{name: w})
			cur = &out[len(out)-1]
		default:
			cur.args = append(cur.args, unquote(w))
		}
	}
	return out, nil
}

// split cuts line into words and operators.
func split(line string) ([]string, error) {
	var words []string
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			words = append(words, b.String())
			b.Reset()
		}
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
			i++
		case c == '#' && b.Len() == 0:
			return words, nil
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unclosed %c", c)
			}
			b.WriteString(line[i : i+j+2])
			i += j + 2
		case (c == '$' || c == '<') && i+1 < len(line) && line[i+1] == '(':
			j := closing(line, i+1)
			if j < 0 {
				return nil, fmt.Errorf("unclosed %c(", c)
			}
			b.WriteString(line[i : j+1])
			i = j + 1
		default:
			if op := prefix(line[i:]); op != "" && (b.Len() == 0 || isOne(op, operators)) {
				flush()
				words = append(words, op)
				i += len(op)
				continue
			}
			b.WriteByte(c)
			i++
		}
	}
	flush()
	return words, nil
}

// closing returns the index of the parenthesis that closes the one at
// line[open], or -1.
func closing(line string, open int) int {
	depth := 0
	for i := open; i < len(line); i++ {
		switch line[i] {
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return -1
}

// prefix returns the operator or redirection line starts with, or "".
func prefix(line string) string {
	for _, op := range append(append([]string{}, redirections...), operators...) {
		if strings.HasPrefix(line, op) {
			return op
		}
	}
	return ""
}

func isOne(w string, set []string) bool {
	for _, s := range set {
		if w == s {
			return true
		}
	}
	return false
}

// unquote drops the quotes around a word the shell would drop.
func unquote(w string) string {
	if len(w) >= 2 && (w[0] == '\'' || w[0] == '"') && w[len(w)-1] == w[0] {
		return w[1 : len(w)-1]
	}
	return w
}
