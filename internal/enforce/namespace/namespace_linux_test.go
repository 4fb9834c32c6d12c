package namespace_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/plan"
)

func TestCloneFlags(t *testing.T) {
	// What the sandbox cloned its init with before the namespaces were
	// plan data (sandbox/run_linux.go cloneFlags).
	const before = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
	got, err := namespace.CloneFlags(plan.DefaultNamespaces())
	if err != nil || got != before {
		t.Fatalf("CloneFlags(DefaultNamespaces()) = %#x, %v; want %#x", got, err, before)
	}
	for _, bad := range [][]plan.Namespace{nil, {"time"}, {plan.NamespaceUser, ""}} {
		if got, err := namespace.CloneFlags(bad); err == nil {
			t.Errorf("CloneFlags(%q) = %#x, nil error; want an error", bad, got)
		}
	}
}
