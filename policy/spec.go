package policy

import (
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Spec is the Go form of a policy file, for library users and tests. Paths
// must be absolute. New validates it completely, with the same rules Parse
// applies to a file.
type Spec struct {
	FSRead         []string      // absolute paths; nil grants no reads
	FSWrite        []string      // absolute paths; nil grants no writes
	FSDeny         []string      // absolute paths inside grants, hidden; nil hides nothing
	FSProtect      []string      // absolute paths inside fs_write grants, read-only; nil adds none
	FSUnprotect    []string      // built-in protected paths left writable; nil leaves every protection
	NetHosts       []string      // hostspec patterns; nil grants no network
	AllowedTools   []string      // bare names or absolute paths; nil grants no tools
	Env            []string      // "NAME" or "NAME=value"; nil passes no variables
	Credentials    []Credential  // added by the proxy, never seen inside; nil adds none
	Budget         budget.Limits // zero fields take defaults; set fields count as explicit
	AllowDowngrade []string      // Downgrade values; nil accepts no downgrade
	// Rootfs is the environment: an absolute folder holding a root
	// filesystem (e.g. made by debootstrap) whose system base and tools the
	// sandbox sees in place of the host's. "" is the host's own.
	Rootfs string
}

// New validates s and returns the policy it describes. Otherwise it returns
// every problem found, as errors.Join of *ParseError values without
// positions whose messages name the field, like `fs_read "x": ...`.
func New(s Spec) (*Policy, error) {
	d := draft{
		fsRead:      specItems(s.FSRead, "fs_read"),
		fsWrite:     specItems(s.FSWrite, "fs_write"),
		fsDeny:      specItems(s.FSDeny, "fs_deny"),
		fsProtect:   specItems(s.FSProtect, "fs_protect"),
		fsUnprotect: specItems(s.FSUnprotect, "fs_unprotect"),
		netHosts:    specItems(s.NetHosts, "net_hosts"),
		tools:       specItems(s.AllowedTools, "allowed_tools"),
		env:         specItems(s.Env, "env"),
		credentials: credentialItems(s.Credentials, "credentials"),
		downgrades:  specItems(s.AllowDowngrade, "allow_downgrade"),
		limits:      limitItems(s.Budget, func(k budget.Limit) string { return string(k) }),
	}
	if s.Rootfs != "" {
		d.rootfs = []item{{val: s.Rootfs, label: "rootfs"}}
	}
	p, errs := validate(d, nil)
	if len(errs) > 0 {
		return nil, join(errs)
	}
	return p, nil
}

// Default returns the policy that grants nothing: no reads beyond the
// system base, no writes, no network, no tools but the command, no
// environment, and the default budget.
func Default() *Policy {
	return &Policy{limits: budget.Limits{}.WithDefaults()}
}

// credentialItems writes credentials in their written form for validate.
func credentialItems(cs []Credential, label string) []item {
	items := make([]item, len(cs))
	for i, c := range cs {
		items[i] = item{val: c.String(), label: label}
	}
	return items
}

// specItems labels values that have no position.
func specItems(vals []string, label string) []item {
	items := make([]item, len(vals))
	for i, v := range vals {
		items[i] = item{val: v, label: label}
	}
	return items
}

// limitItems turns the non-zero fields of l into budget items; label names
// each one in errors.
func limitItems(l budget.Limits, label func(budget.Limit) string) []limitItem {
	var items []limitItem
	for _, k := range budgetKeys {
		if v := limitValue(l, k); v != 0 {
			items = append(items, limitItem{key: k, val: v, label: label(k)})
		}
	}
	return items
}
