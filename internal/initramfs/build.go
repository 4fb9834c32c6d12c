package initramfs

import (
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// Image is what a guest's initramfs holds: airlock's init as /init and the
// kernel modules it loads, nothing else.
type Image struct {
	// Init is the static init binary, run by the kernel as /init.
	Init io.ReaderAt
	// InitSize is its size in bytes.
	InitSize int64
	// Modules is the kernel's module tree (lib/modules/VERSION); nil
	// means no modules.
	Modules fs.FS
	// Want names the modules to load; their dependencies come along.
	Want []string
	// ModuleList is where the init finds the module files, in load order.
	ModuleList string
}

// Build writes the archive of img to w.
func Build(w io.Writer, img Image) error {
	var mods []Module
	if img.Modules != nil && len(img.Want) > 0 {
		var err error
		if mods, err = Modules(img.Modules, img.Want); err != nil {
			return err
		}
	}
	cw := NewWriter(w)
	for _, d := range []string{"dev", "proc", "sys", "m"} {
		if err := cw.Dir(d, 0o755); err != nil {
			return err
		}
	}
	if err := cw.FileFrom("init", 0o755, img.InitSize, io.NewSectionReader(img.Init, 0, img.InitSize)); err != nil {
		return err
	}
	var names []string
	for _, m := range mods {
		f, err := img.Modules.Open(m.Path)
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err == nil {
			err = cw.FileFrom("m/"+m.Name+".ko", 0o644, st.Size(), f)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("initramfs: module %s: %w", m.Path, err)
		}
		names = append(names, "/m/"+m.Name+".ko")
	}
	if err := cw.File(strings.TrimPrefix(img.ModuleList, "/"), 0o644, []byte(strings.Join(names, "\n")+"\n")); err != nil {
		return err
	}
	return cw.Close()
}
