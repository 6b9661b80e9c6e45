package etcdformat

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
)

// ChunkSize is the blob size of each snapshot stream message (etcd's).
const ChunkSize = 32 * 1024

// Stream sends the size bytes of r in chunks of ChunkSize, each with the
// bytes still to come, and then the SHA-256 of everything sent as a last
// blob (remaining 0), as etcd's Maintenance.Snapshot does; a client that
// writes the blobs to a file gets a snapshot file with etcd's trailer. Every
// blob is a fresh buffer, so send may keep it (a gRPC Send may still hold the
// message after it returns). Errors: a short read or send's error, wrapped.
func Stream(r io.Reader, size int64, send func(blob []byte, remaining uint64) error) error {
	h := sha256.New()
	var sent int64
	for sent < size {
		buf := make([]byte, min(ChunkSize, size-sent))
		n, err := io.ReadFull(r, buf)
		if err != nil {
			return fmt.Errorf("snapshot stream: read at %d of %d: %w", sent, size, err)
		}
		sent += int64(n)
		h.Write(buf)
		if err := send(buf, uint64(size-sent)); err != nil {
			return fmt.Errorf("snapshot stream: send: %w", err)
		}
	}
	if err := send(h.Sum(nil), 0); err != nil {
		return fmt.Errorf("snapshot stream: send checksum: %w", err)
	}
	return nil
}

// ErrChecksum is returned for a snapshot file whose SHA-256 trailer does not
// match its content.
var ErrChecksum = errors.New("snapshot file checksum mismatch (truncated or corrupted file)")

// HasTrailer reports whether a snapshot file of n bytes ends with etcd's
// SHA-256 trailer (a bbolt file is a multiple of 512 bytes; etcd checks
// the same way).
func HasTrailer(n int64) bool { return n%512 == sha256.Size }

// AppendTrailer appends the SHA-256 of the file at path to it: the file
// `etcdctl snapshot save` would have written for the same database, which
// `etcdutl snapshot restore` checks. Errors: the file's, wrapped.
func AppendTrailer(path string) (err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("snapshot trailer: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("snapshot trailer: %w", cerr)
		}
	}()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("snapshot trailer: read %s: %w", path, err)
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("snapshot trailer: write %s: %w", path, err)
	}
	return f.Sync()
}
