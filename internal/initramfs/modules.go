package initramfs

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Module is one kernel module the guest loads, with the path of its file in
// the module tree.
type Module struct {
	Name string // as the kernel names it: dashes are underscores
	Path string // relative to the module tree's root (lib/modules/VERSION)
}

// maxModule bounds a module file read to find its dependencies.
const maxModule = 64 << 20

// Modules returns the modules named in want and every module they depend
// on, in an order in which each one's dependencies come before it, from a
// module tree (a kernel's lib/modules/VERSION, as fsys). A module built
// into the kernel (modules.builtin) is left out. Dependencies are read from
// each file's .modinfo section ("depends="), so the tree needs no
// modules.dep: a Debian kernel package unpacked with dpkg-deb has none
// until depmod runs.
func Modules(fsys fs.FS, want []string) ([]Module, error) {
	builtin := map[string]bool{}
	if b, err := fs.ReadFile(fsys, "modules.builtin"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" {
				builtin[modName(l)] = true
			}
		}
	}
	files := map[string]string{}
	err := fs.WalkDir(fsys, "kernel", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			files[modName(p)] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	var out []Module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, from string) error
	visit = func(name, from string) error {
		switch {
		case state[name] == 2 || builtin[name]:
			return nil
		case state[name] == 1:
			return fmt.Errorf("kernel modules: dependency cycle through %s", name)
		}
		p, ok := files[name]
		if !ok {
			if from != "" {
				return fmt.Errorf("kernel module %s (needed by %s) is neither in the module tree nor built in", name, from)
			}
			return fmt.Errorf("kernel module %s is neither in the module tree nor built in: this guest kernel cannot be used", name)
		}
		state[name] = 1
		deps, err := dependsOf(fsys, p)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		out = append(out, Module{Name: name, Path: p})
		return nil
	}
	for _, w := range want {
		if err := visit(modName(w), ""); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// modName is the kernel's name of a module file or name: its base name
// without .ko, dashes as underscores.
func modName(p string) string {
	n := strings.TrimSuffix(path.Base(p), ".ko")
	return strings.ReplaceAll(n, "-", "_")
}

// dependsOf reads the "depends=" entry of a module file's .modinfo.
func dependsOf(fsys fs.FS, p string) ([]string, error) {
	st, err := fs.Stat(fsys, p)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxModule {
		return nil, fmt.Errorf("kernel module %s: %d bytes is more than a module should be", p, st.Size())
	}
	data, err := fs.ReadFile(fsys, p)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: %w", p, err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("kernel module %s has no .modinfo section", p)
	}
	info, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: %w", p, err)
	}
	for _, kv := range bytes.Split(info, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, modName(d))
				}
			}
			return deps, nil
		}
	}
	return nil, errors.New("kernel module " + p + " has no depends= entry in .modinfo")
}
