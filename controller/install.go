package controller

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/sibling"
)

// Installed are the programs Install copies, from the operator's image
// into the enforcer volume: airlock, and the init it prefers to
// re-executing itself, which it opens only from its own folder.
var Installed = []string{"airlock", "airlock-init"}

// Bounds of what Install writes: the CRD admits policies of 64 KiB, and
// the enforcer volume holds enforcerSize.
const (
	maxPolicy  = 64 << 10
	maxProgram = enforcerSize / 4
)

// Install is what a Pod's init container runs (`airlock-controller
// install DIR`, from the operator's image): it copies airlock and
// airlock-init from the folder of self, the running program, into dir,
// and writes policy to dir/policy.yaml. It refuses a program that is not
// a trustworthy regular file beside self (internal/sibling's checks), one
// that is dynamically linked (the Sandbox's image may have no C library,
// and its loader would be the image's), a file dir already holds, and a
// policy that is empty or larger than a Sandbox's can be. Nothing is read
// from the Sandbox's image: the init container runs the operator's.
func Install(self, dir, policy string) error {
	if policy == "" || len(policy) > maxPolicy {
		return fmt.Errorf("install: the policy in %s is %d bytes: want 1 to %d (the controller sets it; is this the Pod's init container?)", EnvPolicy, len(policy), maxPolicy)
	}
	for _, name := range Installed {
		if err := installProgram(self, dir, name); err != nil {
			return err
		}
	}
	if err := writeNew(filepath.Join(dir, policyFile), 0o444, func(w io.Writer) error {
		_, err := io.WriteString(w, policy)
		return err
	}); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}

// installProgram copies the program name beside self into dir.
func installProgram(self, dir, name string) error {
	src, err := sibling.Open(self, name)
	if err != nil {
		return fmt.Errorf("install: %w: the operator's image must hold airlock-controller, airlock and airlock-init (static) in one folder, %s", err, ImageBin)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if st.Size() > maxProgram {
		return fmt.Errorf("install: %s is %d bytes, over %d: is it airlock's?", src.Name(), st.Size(), maxProgram)
	}
	if err := static(src); err != nil {
		return fmt.Errorf("install: %s: %w", src.Name(), err)
	}
	return writeNew(filepath.Join(dir, name), 0o555, func(w io.Writer) error {
		// A LimitedReader of a file lets the kernel copy (copy_file_range).
		n, err := io.Copy(w, io.LimitReader(src, st.Size()+1))
		if err == nil && n != st.Size() {
			err = fmt.Errorf("%s changed while it was copied", src.Name())
		}
		return err
	})
}

// static refuses an ELF program that names an interpreter (a dynamic
// loader).
func static(f *os.File) error {
	e, err := elf.NewFile(f)
	if err != nil {
		return fmt.Errorf("not an ELF program: %w", err)
	}
	defer e.Close()
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked: the Sandbox's image may lack its C library, and its loader would be the image's; build airlock and airlock-init with CGO_ENABLED=0")
		}
	}
	return nil
}

// writeNew creates path, which must not exist (it is never followed if it
// is a symlink), with mode, and fills it with fill; on error it removes
// what it made.
func writeNew(path string, mode os.FileMode, fill func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Chmod(path, mode) // the umask may have taken bits
}
