package tenant

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxNameBytes bounds a tenant name (Kamaji names its tenants' users by a
// 36-character UID or "<namespace>_<name>", both well inside it).
const MaxNameBytes = 128

// MaxCNBytes bounds a certificate CN bound to a tenant (X.520 allows 64
// characters; some issuers exceed it).
const MaxCNBytes = 256

// ErrInvalidName is returned for a tenant name or CN that breaks the rules.
var ErrInvalidName = errors.New("invalid tenant name")

// ValidName checks a tenant name: 1 to MaxNameBytes of ASCII letters,
// digits, '.', '_' and '-', not "." or ".." (it names a znode).
func ValidName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fmt.Errorf("%w %q: 1 to %d characters", ErrInvalidName, name, MaxNameBytes)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w %q", ErrInvalidName, name)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return fmt.Errorf("%w %q: only letters, digits, '.', '_' and '-'", ErrInvalidName, name)
		}
	}
	return nil
}

// ValidCN checks a certificate CN a tenant is served to: not empty (an
// empty CN names no one), valid UTF-8, at most MaxCNBytes.
func ValidCN(cn string) error {
	if cn == "" || len(cn) > MaxCNBytes || !utf8.ValidString(cn) {
		return fmt.Errorf("%w: CN %q must be 1 to %d bytes of UTF-8", ErrInvalidName, cn, MaxCNBytes)
	}
	return nil
}
