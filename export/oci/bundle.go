package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Write puts the bundle in dir, creating it if needed: config.json, the
// synthesized files under FilesDir and, when Options.Rootfs was empty, a
// "rootfs" skeleton with an empty mount point for every mount and the
// plan's symlinks. Everything is created through an os.Root on dir, so a
// symlink in an existing bundle cannot redirect a write outside it.
func (b *Bundle) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("oci: write bundle: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("oci: write bundle: %w", err)
	}
	defer root.Close()
	// Bind sources first (the skeleton looks at them), links into the
	// rootfs last (no mount point is created through a link).
	inRootfs := func(f File) bool { return strings.HasPrefix(path.Clean(f.Path), "rootfs/") }
	for _, f := range b.Files {
		if inRootfs(f) {
			continue
		}
		if err := writeFile(root, f); err != nil {
			return fmt.Errorf("oci: write bundle: %s: %w", f.Path, err)
		}
	}
	if b.ownRootfs {
		if err := b.skeleton(root, dir); err != nil {
			return fmt.Errorf("oci: write bundle: rootfs: %w", err)
		}
	}
	for _, f := range b.Files {
		if !inRootfs(f) {
			continue
		}
		if err := writeFile(root, f); err != nil {
			return fmt.Errorf("oci: write bundle: %s: %w", f.Path, err)
		}
	}
	js, err := json.MarshalIndent(b.Spec, "", "\t")
	if err != nil {
		return fmt.Errorf("oci: write bundle: %w", err)
	}
	if err := root.WriteFile("config.json", append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("oci: write bundle: %w", err)
	}
	return nil
}

// skeleton creates an empty mount point in rootfs for every mount outside
// /proc (the runtime fills it) and for the device binds under /dev: a file
// when the bind source is a regular file or a device, a directory
// otherwise. runc and crun put /dev on a tmpfs first and ignore the device
// mount points here; gVisor's gofer needs them to exist, since the
// sandbox's user may not create them. Mount points are made before the
// symlinks, so none is created through a link.
func (b *Bundle) skeleton(root *os.Root, dir string) error {
	if err := root.MkdirAll("rootfs", 0o755); err != nil {
		return err
	}
	for _, m := range b.Spec.Mounts {
		dst := path.Clean(m.Destination)
		devBind := strings.HasPrefix(dst, "/dev/") && m.Type == "bind"
		if !devBind && (dst == "/dev" || dst == "/proc" || strings.HasPrefix(dst, "/dev/") || strings.HasPrefix(dst, "/proc/")) {
			if dst == "/dev" || dst == "/proc" {
				if err := root.MkdirAll("rootfs"+dst, 0o755); err != nil {
					return err
				}
			}
			continue
		}
		rel := "rootfs" + dst
		if !devBind && !isRegular(m.Type, m.Source, dir) {
			if err := root.MkdirAll(rel, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil {
			return err
		}
		f, err := root.OpenFile(rel, os.O_CREATE|os.O_WRONLY, 0o444)
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// isRegular reports whether a bind mount's source is a regular file (a
// relative source is relative to the bundle).
func isRegular(typ, src, dir string) bool {
	if typ != "bind" {
		return false
	}
	if !filepath.IsAbs(src) {
		src = filepath.Join(dir, src)
	}
	fi, err := os.Stat(src)
	return err == nil && fi.Mode().IsRegular()
}

func writeFile(root *os.Root, f File) error {
	p := path.Clean(f.Path)
	if err := root.MkdirAll(path.Dir(p), 0o755); err != nil {
		return err
	}
	switch {
	case f.Dir:
		return root.MkdirAll(p, 0o755)
	case f.Link != "":
		if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return root.Symlink(f.Link, p)
	}
	if err := root.WriteFile(p, []byte(f.Data), 0o444); err != nil {
		return err
	}
	return root.Chmod(p, 0o444) // WriteFile keeps the mode of an existing file
}
