package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Seccomp is the syscall filter as plain data: which syscalls, by name,
// the filter lets through and under which argument conditions. nsinit
// compiles it to BPF (internal/enforce/seccomp) and installs it last,
// right before execve; export/oci writes it as an OCI linux.seccomp
// section (one entry per rule, SCMP_CMP_MASKED_EQ for each condition), so
// runc or gVisor enforce the same thing.
//
// Besides the rules, every filter compiled from it kills a process that
// calls in with a foreign architecture or the x32 ABI, and answers ENOSYS
// for syscall numbers above the newest one the compiler knows, as an older
// kernel would.
type Seccomp struct {
	// Default is what a syscall gets when it has no entry in Syscalls or
	// none of its rules match. It may not be ActAllow: the filter is an
	// allow-list. plan.DefaultSeccomp uses ActEPERM.
	Default Action `json:"default"`

	// Syscalls lists the syscalls that have rules, sorted by name. A name
	// the target architecture does not have is skipped.
	Syscalls []Syscall `json:"syscalls"`

	// Refused names, by group, syscalls left out of the allow-list on
	// purpose, for explain. They get Default like every syscall not in
	// Syscalls; a test checks that none of them is allowed.
	Refused []SyscallGroup `json:"refused,omitempty"`
}

// seccompJSON is Seccomp on the wire: the syscalls that are allowed
// whatever their arguments (most of them) as names by group, the others
// with their rules. It is a fifth of the size of the plain form, which
// nsinit would spend over a millisecond decoding on every start.
type seccompJSON struct {
	Default  Action         `json:"default"`
	Allow    []SyscallGroup `json:"allow"`
	Syscalls []Syscall      `json:"syscalls"`
	Refused  []SyscallGroup `json:"refused,omitempty"`
}

// plainAllow reports whether sc is allowed whatever its arguments, with
// nothing but a group to say about it.
func plainAllow(sc Syscall) bool {
	return sc.Why == "" && len(sc.Rules) == 1 && sc.Rules[0].Action == ActAllow && len(sc.Rules[0].Conds) == 0
}

// MarshalJSON writes the compact wire form.
func (s Seccomp) MarshalJSON() ([]byte, error) {
	w := seccompJSON{Default: s.Default, Allow: []SyscallGroup{}, Syscalls: []Syscall{}, Refused: s.Refused}
	index := map[string]int{}
	for _, sc := range s.Syscalls {
		if !plainAllow(sc) {
			w.Syscalls = append(w.Syscalls, sc)
			continue
		}
		i, ok := index[sc.Group]
		if !ok {
			i = len(w.Allow)
			index[sc.Group] = i
			w.Allow = append(w.Allow, SyscallGroup{Name: sc.Group})
		}
		w.Allow[i].Names = append(w.Allow[i].Names, sc.Name)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes: Syscalls come back sorted
// by name, as Validate and the compiler expect them.
func (s *Seccomp) UnmarshalJSON(b []byte) error {
	var w seccompJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	out := Seccomp{Default: w.Default, Syscalls: w.Syscalls, Refused: w.Refused}
	for _, g := range w.Allow {
		for _, name := range g.Names {
			out.Syscalls = append(out.Syscalls, Syscall{Name: name, Group: g.Name, Rules: []SyscallRule{{Action: ActAllow}}})
		}
	}
	slices.SortFunc(out.Syscalls, func(a, b Syscall) int { return strings.Compare(a.Name, b.Name) })
	*s = out
	return nil
}

// Syscall gives the rules for one syscall.
type Syscall struct {
	// Name is the kernel's name for the syscall, as in asm/unistd.h and
	// libseccomp ("openat", "clone").
	Name string `json:"name"`

	// Group is the part of the profile it belongs to, for explain
	// ("files and directories").
	Group string `json:"group,omitempty"`

	// Why says, for a syscall whose rules depend on its arguments or refuse
	// it, what the rules let through and why.
	Why string `json:"why,omitempty"`

	// Rules are tried in order; the first whose conditions all hold
	// decides. When none holds, the profile's Default applies. An exporter
	// to a format that has no rule order must keep this meaning.
	Rules []SyscallRule `json:"rules"`
}

// SyscallGroup is a named set of syscalls with the reason for it.
type SyscallGroup struct {
	Name  string   `json:"name"`
	Why   string   `json:"why,omitempty"`
	Names []string `json:"names"`
}

// SyscallRule returns Action when all its conditions hold.
type SyscallRule struct {
	// Action is the filter's answer when the rule matches.
	Action Action `json:"action"`

	// Conds must all hold. Empty means the rule always matches.
	Conds []ArgCond `json:"conds,omitempty"`
}

// ArgCond holds when (args[Arg] & Mask) == Value on the full 64-bit
// register value the kernel reports. A Mask that covers only the low 32
// bits checks an argument that the kernel reads as a 32-bit int and
// truncates (ioctl's request, clone's flags), so garbage in the high half
// cannot dodge the rule. A Mask of all ones compares the high half too, so
// for an int argument and a small Value it refuses a non-zero high half
// that the kernel would have discarded: that fails closed.
type ArgCond struct {
	Arg   int    `json:"arg"`   // argument index, 0 to 5
	Mask  uint64 `json:"mask"`  // bits compared; never zero
	Value uint64 `json:"value"` // required value of the masked bits; no bits outside Mask
}

// check reports why c can never be compiled faithfully, or nil.
func (c ArgCond) check() error {
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

// Holds reports whether c holds for the syscall arguments args.
func (c ArgCond) Holds(args [6]uint64) bool { return args[c.Arg]&c.Mask == c.Value }

// Validate reports whether s can be compiled: the default is not allow,
// every name appears once and has at least one rule, and every condition
// can match.
func (s Seccomp) Validate() error {
	if s.Default == ActAllow {
		return fmt.Errorf("seccomp: profile: default action allow makes the filter a deny-list: default to %v", ActEPERM)
	}
	seen := make(map[string]bool, len(s.Syscalls))
	for _, sc := range s.Syscalls {
		if sc.Name == "" || seen[sc.Name] {
			return fmt.Errorf("seccomp: profile: syscall name %q is empty or repeated: list each syscall once", sc.Name)
		}
		seen[sc.Name] = true
		if len(sc.Rules) == 0 {
			return fmt.Errorf("seccomp: profile: syscall %s has no rules: omit it to get the default action", sc.Name)
		}
		for _, r := range sc.Rules {
			for _, c := range r.Conds {
				if err := c.check(); err != nil {
					return fmt.Errorf("seccomp: profile: syscall %s: %w", sc.Name, err)
				}
			}
		}
	}
	return nil
}

// Action is a seccomp filter return value (SECCOMP_RET_* in
// linux/seccomp.h): the action in the high 16 bits, its data (an errno) in
// the low 16. In JSON it is its String form ("allow", "errno(1)").
type Action uint32

// The actions the airlock filter uses. See seccomp(2).
const (
	// ActAllow lets the syscall run (SECCOMP_RET_ALLOW).
	ActAllow Action = 0x7fff0000
	// ActKillProcess kills the whole process with SIGSYS
	// (SECCOMP_RET_KILL_PROCESS, Linux 4.14). It is reserved for calls no
	// program built for this machine makes: a foreign architecture or the
	// x32 ABI. Older kernels treat the unknown value as SECCOMP_RET_KILL,
	// which kills the thread; either way the call does not run.
	ActKillProcess Action = 0x80000000

	// ActEPERM fails the syscall with EPERM: the default for a syscall the
	// filter does not allow. It is a clean error rather than a kill, so a
	// program can report it (and the sandbox can surface it) instead of
	// dying mid-write.
	ActEPERM = actErrno | errnoEPERM
	// ActENOSYS fails the syscall with ENOSYS, which programs read as "this
	// kernel is too old" and answer by falling back to an older syscall.
	ActENOSYS = actErrno | errnoENOSYS
	// ActEOPNOTSUPP fails the syscall with EOPNOTSUPP, which programs read
	// as "not on this filesystem" and answer with a fallback (glibc's
	// posix_fallocate writes the range instead).
	ActEOPNOTSUPP = actErrno | errnoEOPNOTSUPP
	// ActNotify hands the syscall to the supervisor, which answers it
	// (SECCOMP_RET_USER_NOTIF, Linux 5.0): the backend without namespaces
	// sends connect(2) there, and the supervisor makes the connection
	// itself or refuses it. With nobody listening the call fails ENOSYS.
	ActNotify Action = 0x7fc00000

	actErrno Action = 0x00050000 // SECCOMP_RET_ERRNO; the errno is in the low 16 bits
	actMask  Action = 0xffff0000 // SECCOMP_RET_ACTION_FULL
)

// Errno numbers used by the filter. They are the asm-generic values that
// amd64 and arm64 share, spelled out so the plan needs no x/sys.
const (
	errnoEPERM      = 1  // EPERM: operation not permitted
	errnoENOSYS     = 38 // ENOSYS: function not implemented
	errnoEOPNOTSUPP = 95 // EOPNOTSUPP: operation not supported
)

// Errno reports the errno an ERRNO action returns, and whether a is one.
func (a Action) Errno() (errno uint16, ok bool) {
	if a&actMask != actErrno {
		return 0, false
	}
	return uint16(a), true
}

// String names the action as seccomp(2) does, e.g. "allow" or "errno(1)".
func (a Action) String() string {
	if e, ok := a.Errno(); ok {
		return fmt.Sprintf("errno(%d)", e)
	}
	switch a {
	case ActAllow:
		return "allow"
	case ActKillProcess:
		return "kill_process"
	case ActNotify:
		return "notify"
	}
	return fmt.Sprintf("action(%#x)", uint32(a))
}

// MarshalText writes the String form.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (a *Action) UnmarshalText(b []byte) error {
	s := string(b)
	num := func(prefix string, bits int) (uint64, bool) {
		inner, ok := strings.CutPrefix(s, prefix)
		if !ok {
			return 0, false
		}
		if inner, ok = strings.CutSuffix(inner, ")"); !ok {
			return 0, false
		}
		n, err := strconv.ParseUint(inner, 0, bits)
		return n, err == nil
	}
	switch {
	case s == "allow":
		*a = ActAllow
	case s == "kill_process":
		*a = ActKillProcess
	case s == "notify":
		*a = ActNotify
	case strings.HasPrefix(s, "errno("):
		n, ok := num("errno(", 16)
		if !ok {
			return fmt.Errorf("seccomp action %q: want errno(N) with N from 0 to 65535", s)
		}
		*a = actErrno | Action(n)
	case strings.HasPrefix(s, "action("):
		n, ok := num("action(", 32)
		if !ok {
			return fmt.Errorf("seccomp action %q: want action(0xN)", s)
		}
		*a = Action(n)
	default:
		return fmt.Errorf("seccomp action %q: want allow, kill_process, notify or errno(N)", s)
	}
	return nil
}

// Copy returns a copy of s that shares no slice with it.
func (s Seccomp) Copy() Seccomp {
	c := Seccomp{Default: s.Default, Syscalls: make([]Syscall, len(s.Syscalls))}
	for i, sc := range s.Syscalls {
		sc.Rules = slices.Clone(sc.Rules)
		for j := range sc.Rules {
			sc.Rules[j].Conds = slices.Clone(sc.Rules[j].Conds)
		}
		c.Syscalls[i] = sc
	}
	for _, g := range s.Refused {
		g.Names = slices.Clone(g.Names)
		c.Refused = append(c.Refused, g)
	}
	return c
}
