// Package plan is what a copy moves, as the user asked for it: the
// sending side's plan of its sources (one file as is, or an archive of
// them), a download's patterns, which the remote side expands, and the
// local side's check of the remote side's plan against the sources as
// the user wrote them.
package plan
