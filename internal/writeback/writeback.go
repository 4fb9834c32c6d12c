// Package writeback copies what a sandbox wrote to its staged fs_write
// grants back to the host, once the sandbox has stopped. The stage (the
// overlay upper layers and staged files on the max_write tmpfs, see
// plan/stage.go) is hostile input: the sandbox chose every name,
// type, mode, size, hole, link, link target and xattr in it. So the copy
// back acts as the owner of each grant's host folder, with no capability
// but reading the stage (the host's permission checks apply, and what it
// writes is the owner's); never follows a symlink on either side;
// resolves every host path beneath an fd of the grant opened when the run
// started (so a renamed or replaced ancestor cannot redirect it); writes
// each file to a temporary name and renames it into place (no
// half-written file under the real name); keeps holes, and is charged
// against max_write for the blocks it takes on the host's disk; drops
// setuid, setgid and sticky bits; copies no xattr, ACL or ownership from
// the stage; refuses devices, fifos and sockets, names and link targets
// that are not printable text, and protected paths at any depth (git
// hooks and config, rc files: policy.WriteBackRefusal). Everything it
// refuses or fails to do is listed, bounded and escaped, in the Result.
//
// It imports policy/..., api (for its Result), internal/termtext and
// golang.org/x/sys only. It stops a sandbox from planting code the host
// runs later, from making a setuid binary on the host, from writing where
// the grant's owner may not, from putting names on the host that a
// terminal would act on, and from putting more than max_write on the
// host's disk.
package writeback

import (
	"strings"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/termtext"
)

// Grant is one staged fs_write grant.
type Grant struct {
	Host  string // canonical host path of the grant
	Stage string // its folder on the stage ("0", "1", ...)
	File  bool   // a single-file grant: the stage holds Stage/file
	// HostFD is an O_PATH fd of the grant's host folder (or file), opened
	// without following symlinks when the run started. Required.
	HostFD int
}

// Config is one copy back. The zero Config copies nothing.
type Config struct {
	// StageFD is an fd of the stage's root.
	StageFD int

	// Grants are the staged grants, in any order.
	Grants []Grant

	// Refuse returns why a canonical host path must not be written,
	// created, replaced or removed, or "" when it may be. Nil refuses
	// nothing beyond the built-in checks (file types, pinned paths).
	Refuse func(path string) string

	// Pinned are host paths that must survive: the targets of other grants
	// nested in a staged grant, and their ancestors. They are never
	// removed or replaced by something else.
	Pinned []string

	// MaxBytes is max_write: the bytes the copy back may take on the
	// host's disk, over all grants (budget_linux.go). What does not fit
	// is refused, and listed. Zero means nothing that takes a block is
	// written (removals still are).
	MaxBytes int64

	// MaxListed bounds Result.Refused and Result.Failed. Zero means 50.
	MaxListed int
}

// Result says what the copy back did: the writes of a report
// (api.Writes). Everything it refuses or fails to do is listed, at most
// Config.MaxListed entries each, with totals.
type Result = api.Writes

// Entry is one path the copy back refused or failed on.
type Entry = api.WriteEntry

// The rules a refusal comes from (the audit event's rule): WriteBack
// returns one per entry of Result.Refused.
const (
	// RuleProtect: a protected path, another grant's, a git directory's
	// hooks or config, a device, fifo or socket, a name that is not
	// printable.
	RuleProtect = "fs_protect"
	// RuleMaxWrite: over max_write (Config.MaxBytes).
	RuleMaxWrite = "max_write"
)

// result is a Result being built, with the rule behind each refusal.
type result struct {
	Result
	rules []string
}

func (r *result) refuse(max int, path, reason string) { r.refuseBy(max, RuleProtect, path, reason) }

func (r *result) refuseBy(max int, rule, path, reason string) {
	r.RefusedTotal++
	if len(r.Refused) < max {
		r.Refused = append(r.Refused, Entry{Path: clip(path), Reason: clip(reason)})
		r.rules = append(r.rules, rule)
	}
}

func (r *result) fail(max int, path string, err error) {
	r.Complete = false
	r.FailedTotal++
	if len(r.Failed) < max {
		r.Failed = append(r.Failed, Entry{Path: clip(path), Reason: clip(err.Error())})
	}
}

// maxField bounds a path or reason in the Result.
const maxField = 512

// clip bounds s for the report, marking what was cut, with every
// character a terminal would act on escaped (termtext.Escape): paths come
// from the stage and the host.
func clip(s string) string { return termtext.Escape(s, maxField) }

// pinned reports whether path is one of pins or an ancestor of one.
func pinned(pins []string, path string) bool {
	for _, p := range pins {
		if p == path || strings.HasPrefix(p, path+"/") {
			return true
		}
	}
	return false
}

// gitDirNames are the entries inside a git directory that git executes or
// that redirect it (hooks; config with core.fsmonitor and friends;
// commondir, which moves both).
var gitDirNames = map[string]bool{"hooks": true, "config": true, "commondir": true, "config.worktree": true}
