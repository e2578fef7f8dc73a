package admit

import "time"

// PenaltyPolicy says how a listener answers a source whose handshakes keep
// failing (OpenSSH's PerSourcePenalties): each failure extends the source's
// penalty by Step, to at most Max ahead, and while it lasts each further
// failure halves the time the source's handshakes may take, down to Floor.
type PenaltyPolicy struct {
	Step, Max time.Duration
	// Floor is the shortest handshake a penalized source is given: long
	// enough for a real peer on that address, which speaks at once.
	Floor time.Duration
	// Sources (at least 1) is the most sources remembered at once; a new
	// one finds no room until an older penalty has expired.
	Sources int
}

// Penalties holds the penalized sources under a PenaltyPolicy. It is not
// safe for concurrent use.
type Penalties struct {
	policy  PenaltyPolicy
	sources map[string]penalty
	purged  time.Time // when expired penalties were last removed
}

type penalty struct {
	until   time.Time // the penalty lasts until then
	strikes int       // failures since it began
}

// NewPenalties returns Penalties under p with no source penalized.
func NewPenalties(p PenaltyPolicy) *Penalties {
	return &Penalties{policy: p, sources: map[string]penalty{}}
}

// Len returns the number of sources remembered.
func (p *Penalties) Len() int { return len(p.sources) }

// Fail records a failed handshake of source at now.
func (p *Penalties) Fail(source string, now time.Time) {
	pen, ok := p.sources[source]
	if !ok && len(p.sources) >= p.policy.Sources {
		p.purge(now)
		if len(p.sources) >= p.policy.Sources {
			return
		}
	}
	if !pen.until.After(now) {
		pen = penalty{until: now}
	}
	pen.strikes++
	pen.until = pen.until.Add(p.policy.Step)
	if limit := now.Add(p.policy.Max); pen.until.After(limit) {
		pen.until = limit
	}
	p.sources[source] = pen
}

// Timeout returns how long a handshake of source that begins at now may
// take, full for a source without a penalty, and whether it has one.
func (p *Penalties) Timeout(source string, now time.Time, full time.Duration) (time.Duration, bool) {
	pen, ok := p.sources[source]
	if !ok || !pen.until.After(now) {
		return full, false
	}
	t := full >> min(pen.strikes, 30)
	return max(t, min(p.policy.Floor, full)), true
}

// purge forgets the expired penalties, at most once per Step so that a
// full table costs a scan only that often.
func (p *Penalties) purge(now time.Time) {
	if now.Sub(p.purged) < p.policy.Step {
		return
	}
	p.purged = now
	for s, pen := range p.sources {
		if !pen.until.After(now) {
			delete(p.sources, s)
		}
	}
}
