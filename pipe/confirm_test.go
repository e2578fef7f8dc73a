package pipe

import (
	"strings"
	"testing"
)

// TestCheckConfirmation checks what a confirmation may say of the
// receivers down the chain: every one from the confirming receiver to the
// end counted or named lost, and, with the whole chain known, only names
// of receivers after it, each once.
func TestCheckConfirmation(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("h", 70) + ":1"
	tests := []struct {
		name      string
		receivers uint32
		lost      []string
		down      []string
		whole     bool
		says      string // "" when it holds
	}{
		{"all confirmed", 3, nil, []string{"h2", "h3"}, true, ""},
		{"one lost", 2, []string{"h3"}, []string{"h2", "h3"}, true, ""},
		{"all after it lost", 1, []string{"h2", "h3"}, []string{"h2", "h3"}, true, ""},
		{"a long name, cut", 1, []string{shortName(long)}, []string{long}, true, ""},
		{"one short", 2, nil, []string{"h2", "h3"}, true, "counts 2 receivers and 0 lost, of the 3"},
		{"a takeover's hosts ahead, one short", 1, nil, []string{"h3"}, true, "counts 1 receivers and 0 lost, of the 2"},
		{"a name it does not know", 2, []string{"h9"}, []string{"h2", "h3"}, true, `names "h9" as lost`},
		{"one before it", 2, []string{"h1"}, []string{"h2", "h3"}, true, `names "h1" as lost`},
		{"a name twice", 1, []string{"h3", "h3"}, []string{"h2", "h3"}, true, `names "h3" as lost`},
		{"one more than the chain", 4, nil, []string{"h2", "h3"}, true, "counts 4 receivers and 0 lost, of the 3"},
		{"one more, with one lost", 3, []string{"h3"}, []string{"h2", "h3"}, true, "counts 3 receivers and 1 lost, of the 3"},
		{"more than is known of a chain not whole", 5, nil, []string{"h2"}, false, ""},
		{"names beyond what is known", 2, []string{"h9"}, []string{"h2"}, false, ""},
		{"short of what is known", 1, nil, []string{"h2"}, false, "counts 1 receivers and 0 lost, of the 2"},
		{"no chain", 1, nil, nil, false, ""},
	}
	for _, tt := range tests {
		err := checkConfirmation(tt.receivers, tt.lost, tt.down, tt.whole)
		switch {
		case tt.says == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.says != "" && (err == nil || !strings.Contains(err.Error(), tt.says)):
			t.Errorf("%s: error %v, want one saying %q", tt.name, err, tt.says)
		}
	}
}
