package namespace

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan"
)

// flags maps each namespace to its CLONE_NEW* flag (clone(2); the cgroup
// namespace needs Linux 4.6).
var flags = map[plan.Namespace]uintptr{
	plan.NamespaceUser:   unix.CLONE_NEWUSER,
	plan.NamespaceMount:  unix.CLONE_NEWNS,
	plan.NamespacePID:    unix.CLONE_NEWPID,
	plan.NamespaceNet:    unix.CLONE_NEWNET,
	plan.NamespaceIPC:    unix.CLONE_NEWIPC,
	plan.NamespaceUTS:    unix.CLONE_NEWUTS,
	plan.NamespaceCgroup: unix.CLONE_NEWCGROUP,
}

// CloneFlags returns the clone(2) flags that create the namespaces ns
// (syscall.SysProcAttr.Cloneflags). It fails for a namespace it does not
// know, and for an empty list: a sandbox always has namespaces.
func CloneFlags(ns []plan.Namespace) (uintptr, error) {
	if len(ns) == 0 {
		return 0, fmt.Errorf("namespace: the plan lists no namespaces: compile it with plan.Compile")
	}
	var f uintptr
	for _, n := range ns {
		bit, ok := flags[n]
		if !ok {
			return 0, fmt.Errorf("namespace: %q has no clone flag: airlock knows %v", n, plan.DefaultNamespaces())
		}
		f |= bit
	}
	return f, nil
}
