//go:build !linux

package landlock

import "fmt"

// ABI returns 0 and an error wrapping ErrABI (and so errors.ErrUnsupported):
// Landlock exists only on Linux.
func ABI() (int, error) {
	return 0, fmt.Errorf("landlock: query ABI version: %w: Landlock needs Linux", ErrABI)
}

// Restrict enforces nothing and returns an error wrapping ErrABI (and so
// errors.ErrUnsupported): Landlock exists only on Linux.
func Restrict(cfg Config) (Status, error) {
	return Status{}, fmt.Errorf("landlock: restrict: %w: Landlock needs Linux", ErrABI)
}

// SelfTest returns an error wrapping ErrABI (and so errors.ErrUnsupported):
// without Landlock nothing can be proved denied.
func SelfTest(denied string) error {
	return fmt.Errorf("landlock: self-test %q: %w: Landlock needs Linux", denied, ErrABI)
}
