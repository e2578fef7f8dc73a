package proto

import "fmt"

// Unasked is the failure of a download whose remote side said it would
// send, or sent, what was not asked for: claim is what it said or sent,
// quoted in the command's error (see command.Unasked).
type Unasked struct {
	Claim string
	Why   string
}

func (e *Unasked) Error() string {
	return fmt.Sprintf("not asked for: %q: %s", e.Claim, e.Why)
}
