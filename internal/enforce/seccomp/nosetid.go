package seccomp

import "github.com/airlock-sandbox/airlock/plan/spec"

// The mode and open flag bits NoSetID reads (inode(7), open(2)).
const (
	modeSetUID  = 0o4000     // S_ISUID
	modeSetGID  = 0o2000     // S_ISGID
	openCreat   = 0o100      // O_CREAT
	openTmpfile = 0o20000000 // __O_TMPFILE: O_TMPFILE without O_DIRECTORY
)

// NoSetID builds a filter to stack on a program that has a filter of its
// own and serves files to a sandbox (QEMU's 9p export, with -sandbox on):
// it lets every syscall the target's table knows through, but none that
// gives a file a set-user-ID or set-group-ID bit, which the sandbox could
// otherwise leave on the host as the file's owner (root's, for root's
// grants): chmod, fchmod, fchmodat and fchmodat2 with such a bit in the
// mode, open, openat and creat that create a file (O_CREAT, O_TMPFILE)
// with one, and mknod and mknodat with one, answer EPERM; openat2, whose
// mode is in memory the filter cannot read, answers ENOSYS. It is the
// program's own filter that is the allow-list.
func NoSetID(opts Options) ([]Insn, error) {
	t, err := targetFor(opts.Arch)
	if err != nil {
		return nil, err
	}
	// setID refuses a mode with either bit, in argument mode, when the
	// flags in argument flags (-1: none to check) hold one of creates.
	setID := func(mode, flags int, creates ...uint64) []spec.SyscallRule {
		var rules []spec.SyscallRule
		for _, bit := range []uint64{modeSetUID, modeSetGID} {
			m := spec.ArgCond{Arg: mode, Mask: bit, Value: bit}
			if flags < 0 {
				rules = append(rules, spec.SyscallRule{Action: spec.ActEPERM, Conds: []spec.ArgCond{m}})
				continue
			}
			for _, c := range creates {
				rules = append(rules, spec.SyscallRule{Action: spec.ActEPERM, Conds: []spec.ArgCond{{Arg: flags, Mask: c, Value: c}, m}})
			}
		}
		return append(rules, spec.SyscallRule{Action: spec.ActAllow})
	}
	narrowed := map[string][]spec.SyscallRule{
		"chmod":     setID(1, -1),
		"fchmod":    setID(1, -1),
		"fchmodat":  setID(2, -1),
		"fchmodat2": setID(2, -1),
		"creat":     setID(1, -1),
		"mknod":     setID(1, -1),
		"mknodat":   setID(2, -1),
		"open":      setID(2, 1, openCreat, openTmpfile),
		"openat":    setID(3, 2, openCreat, openTmpfile),
		"openat2":   {{Action: spec.ActENOSYS}},
	}
	p := spec.Seccomp{Default: spec.ActEPERM}
	for _, e := range t.nums {
		rules, ok := narrowed[e.name]
		if !ok {
			rules = []spec.SyscallRule{{Action: spec.ActAllow}}
		}
		p.Syscalls = append(p.Syscalls, spec.Syscall{Name: e.name, Rules: rules})
	}
	return compile(p, t, dispatchTree)
}
