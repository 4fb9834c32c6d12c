// Package gvisor finds gVisor's runsc and picks the platform it runs on,
// for isolation gvisor and for doctor.
package gvisor

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
)

// Candidates are where runsc is looked for, in order.
var Candidates = []string{"/usr/bin/runsc", "/usr/local/bin/runsc", "/usr/sbin/runsc"}

// Find returns the first runsc in Candidates and the platform airlock runs
// it on: systrap where this runsc has it (the fastest without KVM), else
// ptrace. KVM is never picked by itself: a /dev/kvm that opens may still
// hang its guests (nested virtualization without hardware support).
func Find() (bin, platform string, err error) {
	for _, p := range Candidates {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, Platform(p), nil
		}
	}
	return "", "", fmt.Errorf("runsc is not installed (looked in %v): apt-get install runsc, or see gvisor.dev", Candidates)
}

// platforms caches Platform's answer per binary (path, size and mtime):
// asking runsc costs two process starts, which every gVisor sandbox's
// start-up would otherwise pay.
var platforms sync.Map

// Platform returns the platform Find would pick for the runsc at bin.
func Platform(bin string) string {
	key := bin
	if fi, err := os.Stat(bin); err == nil {
		key = fmt.Sprintf("%s\x00%d\x00%d", bin, fi.Size(), fi.ModTime().UnixNano())
	}
	if p, ok := platforms.Load(key); ok {
		return p.(string)
	}
	help, _ := exec.Command(bin, "help", "run").CombinedOutput() // lists the platforms
	flags, _ := exec.Command(bin, "flags").CombinedOutput()
	p := "ptrace"
	if bytes.Contains(help, []byte("systrap")) || bytes.Contains(flags, []byte("systrap")) {
		p = "systrap"
	}
	platforms.Store(key, p)
	return p
}
