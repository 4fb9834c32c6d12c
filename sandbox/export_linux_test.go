package sandbox

import (
	"errors"

	"golang.org/x/sys/unix"
)

// WeakerTables is every line the report's enforcement.weaker can hold, by
// the table it comes from, for the test that reads each one back
// (weaker_linux_test.go). Lines with a variable part hold its verbs.
var WeakerTables = func() map[string][]string {
	t := map[string][]string{
		"hostname": {weakerHostname},
		"inplace":  {weakerInPlace},
		"pidsroot": {weakerPidsRoot},
		"landlock": append([]string{weakerUIDUser, weakerUIDRoot, weakerBrokers(errors.New("%v"))}, weakerUnshared...),
		"gvisor":   sentryWeaker,
		"microvm":  weakerMicroVM,
	}
	for d, line := range weakerMicroVMHost {
		t["microvm-host/"+string(d)] = []string{line}
	}
	for d, line := range weaker {
		t["downgrade/"+string(d)] = []string{line}
	}
	for _, err := range []error{unix.ENOSPC, unix.EPERM, unix.EINVAL} {
		why, _ := usernsRefused(err)
		t["namespaces/"+unix.ErrnoName(err.(unix.Errno))] = []string{"namespaces: " + why}
	}
	return t
}()
