package cp

import "fmt"

// unasked is the failure of a download whose remote side said it would
// send, or sent, what was not asked for: claim is what it said or sent,
// quoted in the command's error (see command.Unasked).
type unasked struct {
	claim string
	why   string
}

func (e *unasked) Error() string {
	return fmt.Sprintf("not asked for: %q: %s", e.claim, e.why)
}
