package k8stest

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// OperatorImage is the name Node.ImportOperator gives the operator's
// image, which the controller's Pods take airlock from.
const OperatorImage = "localhost/k8stest/airlock-operator:1"

// Image is a container image made here, without a registry or a builder:
// layers of plain files, written as a `docker save` archive that
// `ctr images import` reads (Node.Import).
type Image struct {
	// Name is the image reference pods give, e.g. localhost/k8stest/x:1.
	// Pods must pull Never: there is no registry.
	Name string

	// Layers, lowest first.
	Layers []Layer

	// Entrypoint, Cmd, Env and WorkingDir go into the image's config.
	Entrypoint, Cmd, Env []string
	WorkingDir           string
}

// Layer is one uncompressed layer tar and its digest.
type Layer struct {
	path   string // the tar file
	digest string // sha256:HEX of the tar, which is also its diff ID
}

// File is one file of a FilesLayer.
type File struct {
	Source string      // host file to copy; empty for Data
	Data   []byte      // the content when Source is empty
	Mode   fs.FileMode // permission bits (and fs.ModeDir for a folder)
	Link   string      // when not empty, the file is a symbolic link to Link
}

// DirLayer returns a layer of everything below root, as the image's /
// (regular files, folders and symbolic links; device nodes, sockets and
// fifos are left out: the runtime makes /dev). The tar is kept in cache
// under key and made again only when missing, so a large root costs its
// tar once per machine.
func DirLayer(root, cache, key string) (Layer, error) {
	tarPath := filepath.Join(cache, key+".tar")
	if d, err := os.ReadFile(tarPath + ".sha256"); err == nil {
		if _, err := os.Stat(tarPath); err == nil {
			return Layer{path: tarPath, digest: strings.TrimSpace(string(d))}, nil
		}
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Layer{}, fmt.Errorf("k8stest: layer cache: %w", err)
	}
	l, err := writeLayer(tarPath, func(tw *tar.Writer) error { return tarDir(tw, root) })
	if err != nil {
		return Layer{}, err
	}
	if err := os.WriteFile(tarPath+".sha256", []byte(l.digest+"\n"), 0o644); err != nil {
		return Layer{}, fmt.Errorf("k8stest: layer cache: %w", err)
	}
	return l, nil
}

// FilesLayer returns a layer of files (keyed by their absolute path in
// the image), written into dir. Parent folders are added as 0755.
func FilesLayer(dir string, files map[string]File) (Layer, error) {
	f, err := os.CreateTemp(dir, "layer-*.tar")
	if err != nil {
		return Layer{}, fmt.Errorf("k8stest: %w", err)
	}
	f.Close()
	return writeLayer(f.Name(), func(tw *tar.Writer) error {
		dirs := map[string]bool{}
		var mkdirs func(p string) error
		mkdirs = func(p string) error {
			if p == "/" || p == "." || dirs[p] {
				return nil
			}
			if err := mkdirs(filepath.Dir(p)); err != nil {
				return err
			}
			dirs[p] = true
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(p, "/") + "/", Mode: 0o755})
		}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range files {
				if !yield(k) {
					return
				}
			}
		}) {
			if !filepath.IsAbs(name) || filepath.Clean(name) != name {
				return fmt.Errorf("k8stest: layer file %q: want a clean absolute path", name)
			}
			file := files[name]
			if err := mkdirs(filepath.Dir(name)); err != nil {
				return err
			}
			if file.Link != "" {
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(name, "/"), Linkname: file.Link, Mode: 0o777}); err != nil {
					return err
				}
				continue
			}
			if file.Mode.IsDir() {
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(name, "/") + "/", Mode: int64(file.Mode.Perm())}); err != nil {
					return err
				}
				dirs[name] = true
				continue
			}
			data := file.Data
			if file.Source != "" {
				var err error
				if data, err = os.ReadFile(file.Source); err != nil {
					return fmt.Errorf("k8stest: layer file %s: %w", name, err)
				}
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(name, "/"), Mode: int64(file.Mode.Perm()), Size: int64(len(data))}); err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeLayer writes a layer tar at path with fill and returns it with
// its digest. A failed write leaves no file.
func writeLayer(path string, fill func(*tar.Writer) error) (l Layer, err error) {
	tmp := path + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return Layer{}, fmt.Errorf("k8stest: layer: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(f, h))
	if err = fill(tw); err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Layer{}, fmt.Errorf("k8stest: layer %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return Layer{}, fmt.Errorf("k8stest: layer: %w", err)
	}
	return Layer{path: path, digest: digestOf(h)}, nil
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// tarDir writes every folder, regular file and symbolic link below root,
// with its mode and owner; hard links become copies.
func tarDir(tw *tar.Writer, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return nil // devices, sockets, fifos
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		if err == nil && n != fi.Size() {
			err = fmt.Errorf("%s changed while it was read", p)
		}
		return err
	})
}

// writeArchive writes img as a `docker save` archive at path: one
// manifest.json naming the image, its config and its layers.
func (img *Image) writeArchive(path string) error {
	if img.Name == "" || len(img.Layers) == 0 {
		return errors.New("k8stest: an image needs a name and a layer")
	}
	diffIDs := make([]string, len(img.Layers))
	layerNames := make([]string, len(img.Layers))
	for i, l := range img.Layers {
		diffIDs[i] = l.digest
		layerNames[i] = strings.TrimPrefix(l.digest, "sha256:") + "/layer.tar"
	}
	cfg, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": img.Entrypoint, "Cmd": img.Cmd, "Env": img.Env, "WorkingDir": img.WorkingDir,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return err
	}
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{img.Name}, "Layers": layerNames}})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("k8stest: image archive: %w", err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add(cfgName, cfg); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, l := range img.Layers {
		if seen[layerNames[i]] {
			continue
		}
		seen[layerNames[i]] = true
		lf, err := os.Open(l.path)
		if err != nil {
			return err
		}
		fi, err := lf.Stat()
		if err == nil {
			if err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: layerNames[i], Mode: 0o644, Size: fi.Size()}); err == nil {
				_, err = io.Copy(tw, lf)
			}
		}
		lf.Close()
		if err != nil {
			return fmt.Errorf("k8stest: image archive: %w", err)
		}
	}
	if err := add("manifest.json", manifest); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
