package namespace

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan/spec"
)

// flags maps each namespace to its CLONE_NEW* flag (clone(2); the cgroup
// namespace needs Linux 4.6).
var flags = map[spec.Namespace]uintptr{
	spec.NamespaceUser:   unix.CLONE_NEWUSER,
	spec.NamespaceMount:  unix.CLONE_NEWNS,
	spec.NamespacePID:    unix.CLONE_NEWPID,
	spec.NamespaceNet:    unix.CLONE_NEWNET,
	spec.NamespaceIPC:    unix.CLONE_NEWIPC,
	spec.NamespaceUTS:    unix.CLONE_NEWUTS,
	spec.NamespaceCgroup: unix.CLONE_NEWCGROUP,
}

// CloneFlags returns the clone(2) flags that create the namespaces ns
// (syscall.SysProcAttr.Cloneflags). It fails for a namespace it does not
// know, and for an empty list: a sandbox always has namespaces.
func CloneFlags(ns []spec.Namespace) (uintptr, error) {
	if len(ns) == 0 {
		return 0, fmt.Errorf("namespace: the plan lists no namespaces: compile it with plan.Compile")
	}
	var f uintptr
	for _, n := range ns {
		bit, ok := flags[n]
		if !ok {
			return 0, fmt.Errorf("namespace: %q has no clone flag: airlock knows %v", n, spec.DefaultNamespaces())
		}
		f |= bit
	}
	return f, nil
}
