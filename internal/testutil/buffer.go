// Package testutil holds what the tests of several packages share.
package testutil

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that one goroutine (or process) may write while
// a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Bytes returns a copy of what was written so far.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Len returns how many bytes were written so far.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}

// HeldWriter is a writer whose writes wait until Release is closed, then
// go to Out.
type HeldWriter struct {
	Release chan struct{}
	Out     Buffer
}

// NewHeldWriter returns a HeldWriter not yet released.
func NewHeldWriter() *HeldWriter { return &HeldWriter{Release: make(chan struct{})} }

// Write waits for Release, then appends p to Out.
func (h *HeldWriter) Write(p []byte) (int, error) {
	<-h.Release
	return h.Out.Write(p)
}
