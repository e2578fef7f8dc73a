// Package tree is what rdmacp reads and writes of the file system: the
// sending side's tar archive of its sources (PAX, with sparse entries
// and small files read ahead), and the receiving side's destination (one
// file, or an archive extracted as it arrives, treated as hostile), with
// the partial copies a resume goes on from and the progress line's tally.
package tree
