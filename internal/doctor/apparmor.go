package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// restrictSysctl is AppArmor's switch for unprivileged user namespaces
// (Ubuntu 23.10 and later; upstream Linux 6.7). At 1, a process without
// CAP_SYS_ADMIN whose AppArmor profile does not grant "userns" gets user
// namespaces without capabilities (Ubuntu) or none at all (upstream).
const restrictSysctl = "kernel.apparmor_restrict_unprivileged_userns"

// apparmorPaths are the paths packaging/apparmor/airlock attaches to;
// AppArmor picks a profile by the executable's path.
var apparmorPaths = []string{"/usr/bin/airlock", "/usr/local/bin/airlock"}

// AppArmor is AppArmor's restriction on unprivileged user namespaces and
// how this process stands with it. The zero AppArmor is a host without
// the restriction.
type AppArmor struct {
	// Restrict is the value of kernel.apparmor_restrict_unprivileged_userns;
	// "" when the file is absent (the kernel has no such restriction, or
	// AppArmor is off) or could not be read (then Err says why).
	Restrict string
	// Label is the AppArmor profile this process runs under, without its
	// mode: "unconfined" under none, "airlock" under packaging/apparmor's.
	// Read only when Restrict is not "0" or ""; "" then means unreadable.
	Label string
	// Exe is this process's executable, which AppArmor attaches profiles
	// by; read like Label, "" when unknown.
	Exe string
	// Err is why the sysctl or the label could not be read; nil when both
	// were (or the label was not needed).
	Err error
	// Mount is nil when a process this one starts in new user and mount
	// namespaces could mount there (make its mounts private), which needs
	// the capabilities the restriction withholds; else why not. Ubuntu
	// lets an unconfined program create the namespaces and denies their
	// capabilities, so creating them proves nothing. Probed only when
	// Restrict is set.
	Mount error
}

// restricted reports whether the sysctl is set.
func (a AppArmor) restricted() bool { return a.Restrict != "" && a.Restrict != "0" }

// confined reports whether this process runs under an AppArmor profile.
func (a AppArmor) confined() bool { return a.Label != "" && a.Label != "unconfined" }

// readAppArmor reads the restriction and this process's label from the
// procfs mounted at proc (tests pass a fake tree). The label comes from
// attr/apparmor/current (Linux 5.8), else attr/current, where AppArmor is
// the only LSM that writes labels; it reads "name (mode)" or "unconfined".
func readAppArmor(proc string) AppArmor {
	var a AppArmor
	name := filepath.Join(proc, "sys/kernel/apparmor_restrict_unprivileged_userns")
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return a
	}
	if err != nil {
		a.Err = fmt.Errorf("read %s: %w", name, err)
		return a
	}
	a.Restrict = strings.TrimSpace(string(b))
	if !a.restricted() {
		return a
	}
	if exe, err := os.Readlink(filepath.Join(proc, "self/exe")); err == nil {
		a.Exe = exe
	}
	name = filepath.Join(proc, "self/attr/apparmor/current")
	b, err = os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		name = filepath.Join(proc, "self/attr/current")
		b, err = os.ReadFile(name)
	}
	if err != nil {
		a.Err = fmt.Errorf("read AppArmor label: %w", err)
		return a
	}
	label := strings.TrimSpace(strings.TrimRight(string(b), "\x00\n"))
	if i := strings.LastIndex(label, " ("); i > 0 && strings.HasSuffix(label, ")") {
		label = label[:i]
	}
	a.Label = label
	return a
}

// evaluateAppArmor judges whether AppArmor's restriction keeps this
// process from building the sandbox's namespaces, and names the fixes.
// blocked is the namespaces layer's detail when it does, "" otherwise.
func evaluateAppArmor(f Facts) (c Check, blocked string) {
	a := f.AppArmor
	c.Name = "apparmor"
	switch {
	case a.Restrict == "" && a.Err != nil:
		c.OK, c.Detail = f.UserNS == nil, "cannot read AppArmor's user namespace restriction: "+a.Err.Error()
		return c, ""
	case a.Restrict == "":
		c.OK, c.Detail = true, "AppArmor does not restrict user namespaces here ("+restrictSysctl+" absent)"
		return c, ""
	case !a.restricted():
		c.OK, c.Detail = true, restrictSysctl+" is 0: AppArmor does not restrict user namespaces"
		return c, ""
	}
	c.Detail = restrictSysctl + " is " + a.Restrict + ": user namespaces get no capabilities unless the program's AppArmor profile grants userns; "
	switch {
	case a.confined():
		c.Detail += fmt.Sprintf("airlock runs under the AppArmor profile %q", a.Label)
	case a.Label == "unconfined":
		c.Detail += "airlock runs without an AppArmor profile"
	case a.Err != nil:
		c.Detail += "airlock's AppArmor label is unknown (" + a.Err.Error() + ")"
	default:
		c.Detail += "airlock's AppArmor label is unknown"
	}
	if a.Exe != "" {
		c.Detail += " (" + a.Exe + ")"
	}
	switch {
	case f.Root:
		c.OK = true
		c.Detail += "; root is exempt"
		c.Consequence = "runs by an unprivileged user need airlock's AppArmor profile: see packaging/apparmor/README.md"
		return c, ""
	case f.UserNS == nil && a.Mount == nil:
		c.OK = true
		c.Detail += "; a user namespace it creates can mount"
		return c, ""
	}
	why := "see userns"
	if a.Mount != nil {
		why = a.Mount.Error()
	}
	if a.confined() {
		c.Detail += "; the sandbox's namespaces cannot be built (" + why + "): the profile may lack the userns rule, or something else refuses them"
		c.Consequence = "make sure the profile grants userns, as packaging/apparmor/airlock does, and load it again: sudo apparmor_parser -r /etc/apparmor.d/airlock; else " + apparmorFixes(a.Exe)
		return c, fmt.Sprintf("cannot build the sandbox's namespaces under the AppArmor profile %q (see the apparmor check)", a.Label)
	}
	c.Detail += "; so the sandbox's namespaces cannot be built (" + why + ")"
	c.Consequence = apparmorFixes(a.Exe)
	return c, "AppArmor gives the sandbox's namespaces no capabilities (see the apparmor check)"
}

// apparmorFixes names the three ways past the restriction, strongest
// first, for the binary at exe.
func apparmorFixes(exe string) string {
	attach := "it attaches to " + strings.Join(apparmorPaths, " and ")
	if exe != "" && !slices.Contains(apparmorPaths, exe) {
		attach += "; this binary is " + exe + ", so first edit its attachment to that path"
	}
	return "fix one of three ways: install airlock's AppArmor profile, which grants userns and nothing else (" + attach + "; see packaging/apparmor/README.md): " +
		"sudo cp packaging/apparmor/airlock /etc/apparmor.d/airlock && sudo apparmor_parser -r /etc/apparmor.d/airlock; " +
		"or lift the restriction for every program on the host (weaker): sudo sysctl " + restrictSysctl + "=0; " +
		"or accept allow_downgrade: [namespaces] in the policy, which runs on the landlock backend: Landlock and seccomp, without namespaces"
}
