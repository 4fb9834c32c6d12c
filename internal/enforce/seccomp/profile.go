package seccomp

import (
	"fmt"
	"sort"
)

// Profile is a seccomp policy as plain data: which syscalls, by name, the
// filter lets through and under which argument conditions. Build compiles it
// to BPF; an exporter can turn it into an OCI linux.seccomp section (one
// entry per Rule, SCMP_CMP_MASKED_EQ for each Cond) so runc or gVisor enforce
// the same thing.
//
// Besides the rules, every filter Build emits kills a process that calls in
// with a foreign architecture or the x32 ABI, and answers ENOSYS for syscall
// numbers above the newest one in its table, as an older kernel would.
type Profile struct {
	// Default is what a syscall gets when it has no entry in Syscalls or
	// none of its rules match. The zero value is SECCOMP_RET_KILL_THREAD,
	// which kills the calling thread; DefaultProfile uses ActEPERM.
	Default Action

	// Syscalls lists the syscalls that have rules, sorted by name. A name
	// the target architecture does not have is skipped.
	Syscalls []Syscall
}

// Syscall gives the rules for one syscall.
type Syscall struct {
	// Name is the kernel's name for the syscall, as in asm/unistd.h and
	// libseccomp ("openat", "clone").
	Name string

	// Rules are tried in order; the first whose conditions all hold
	// decides. When none holds, the profile's Default applies. An exporter
	// to a format that has no rule order must keep this meaning.
	Rules []Rule
}

// Rule returns Action when all its conditions hold.
type Rule struct {
	// Action is the filter's answer when the rule matches.
	Action Action

	// Conds must all hold. Empty means the rule always matches.
	Conds []Cond
}

// Cond holds when (args[Arg] & Mask) == Value on the full 64-bit register
// value the kernel reports. A Mask that covers only the low 32 bits checks
// an argument that the kernel reads as a 32-bit int and truncates (ioctl's
// request, clone's flags), so garbage in the high half cannot dodge the
// rule. A Mask of all ones compares the high half too, so for an int
// argument and a small Value it refuses a non-zero high half that the
// kernel would have discarded: that fails closed.
type Cond struct {
	Arg   int    // argument index, 0 to 5
	Mask  uint64 // bits compared; never zero
	Value uint64 // required value of the masked bits; no bits outside Mask
}

// check reports why c can never be compiled faithfully, or nil.
func (c Cond) check() error {
	switch {
	case c.Arg < 0 || c.Arg > 5:
		return fmt.Errorf("argument index %d: syscalls have arguments 0 to 5", c.Arg)
	case c.Mask == 0:
		return fmt.Errorf("argument %d: zero mask always matches", c.Arg)
	case c.Value&^c.Mask != 0:
		return fmt.Errorf("argument %d: value %#x has bits outside mask %#x and never matches", c.Arg, c.Value, c.Mask)
	}
	return nil
}

// holds reports whether c holds for the syscall arguments args.
func (c Cond) holds(args [6]uint64) bool { return args[c.Arg]&c.Mask == c.Value }

// Validate reports whether p can be compiled: every name appears once and
// has at least one rule, and every condition can match.
func (p Profile) Validate() error {
	seen := make(map[string]bool, len(p.Syscalls))
	for _, s := range p.Syscalls {
		if s.Name == "" || seen[s.Name] {
			return fmt.Errorf("seccomp: profile: syscall name %q is empty or repeated: list each syscall once", s.Name)
		}
		seen[s.Name] = true
		if len(s.Rules) == 0 {
			return fmt.Errorf("seccomp: profile: syscall %s has no rules: omit it to get the default action", s.Name)
		}
		for _, r := range s.Rules {
			for _, c := range r.Conds {
				if err := c.check(); err != nil {
					return fmt.Errorf("seccomp: profile: syscall %s: %w", s.Name, err)
				}
			}
		}
	}
	return nil
}

// DefaultProfile returns airlock's profile: the container runtimes' default
// allow-list (moby's profiles/seccomp/default.json, the unprivileged part)
// minus the syscalls listed in the package documentation, with argument
// rules for clone, socket, socketpair, ioctl and personality. Each call
// returns a fresh copy the caller may modify.
func DefaultProfile() Profile {
	p := Profile{Default: ActEPERM}
	for _, name := range allowed {
		p.Syscalls = append(p.Syscalls, Syscall{Name: name, Rules: []Rule{{Action: ActAllow}}})
	}
	for name, rules := range conditional() {
		p.Syscalls = append(p.Syscalls, Syscall{Name: name, Rules: rules})
	}
	sort.Slice(p.Syscalls, func(i, j int) bool { return p.Syscalls[i].Name < p.Syscalls[j].Name })
	return p
}
