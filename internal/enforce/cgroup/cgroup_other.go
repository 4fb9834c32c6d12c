//go:build !linux

package cgroup

import (
	"errors"
	"fmt"
	"os/exec"
	"time"
)

var errUnsupported = fmt.Errorf("cgroup: control groups exist only on Linux: %w", errors.ErrUnsupported)

// Detect returns an error wrapping errors.ErrUnsupported.
func Detect() (Host, error) { return Host{}, errUnsupported }

// Create returns an error wrapping errors.ErrUnsupported.
func Create(h Host, cfg Config) (*Group, error) { return nil, errUnsupported }

// Limit returns an error wrapping errors.ErrUnsupported.
func (g *Group) Limit(cfg Config) error { return errUnsupported }

// Start returns an error wrapping errors.ErrUnsupported.
func (g *Group) Start(cmd *exec.Cmd) error { return errUnsupported }

// Notifier is the Linux type's stand-in: nothing is ever announced.
type Notifier struct{}

// Notify returns an error wrapping errors.ErrUnsupported.
func (g *Group) Notify() (*Notifier, error) { return nil, errUnsupported }

// C returns nil, a channel that never fires.
func (n *Notifier) C() <-chan struct{} { return nil }

// Covers reports false, false.
func (n *Notifier) Covers() (pids, oom bool) { return false, false }

// Close does nothing.
func (n *Notifier) Close() {}

// Status returns the zero Status.
func (g *Group) Status() Status { return Status{} }

// Usage returns an error wrapping errors.ErrUnsupported.
func (g *Group) Usage() (Usage, error) { return Usage{}, errUnsupported }

// MemoryCPU returns an error wrapping errors.ErrUnsupported.
func (g *Group) MemoryCPU() (int64, time.Duration, error) { return 0, 0, errUnsupported }

// CPU returns an error wrapping errors.ErrUnsupported.
func (g *Group) CPU() (time.Duration, error) { return 0, errUnsupported }

// Events returns an error wrapping errors.ErrUnsupported.
func (g *Group) Events() (Events, error) { return Events{}, errUnsupported }

// Kill returns an error wrapping errors.ErrUnsupported.
func (g *Group) Kill() error { return errUnsupported }

// Destroy returns nil: no group can exist.
func (g *Group) Destroy() error { return nil }

// Janitor returns an error wrapping errors.ErrUnsupported.
func Janitor(h Host, alive func(name string) bool) ([]string, error) { return nil, errUnsupported }

// JanitorShared returns an error wrapping errors.ErrUnsupported.
func JanitorShared(h Host, cooldown time.Duration) (bool, []string, error) {
	return false, nil, errUnsupported
}

// NewName returns an error wrapping errors.ErrUnsupported.
func NewName(supervisorPid int) (string, error) { return "", errUnsupported }

// OwnerAlive reports true: without /proc it cannot tell, and true keeps
// groups.
func OwnerAlive(name string) bool { return true }
