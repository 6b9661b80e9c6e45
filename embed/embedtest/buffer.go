package embedtest

import (
	"bytes"
	"sync"
)

// SyncBuffer is an io.Writer that may be read (String) while others write
// to it, e.g. a logger's or a child process's output. Safe for concurrent
// use; the zero value is empty and ready.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
