// Package image unpacks a container image into a folder that an
// environment (the policy's rootfs) can use as its root filesystem: an OCI
// image layout (a folder with index.json, or a tar of one, which is what
// `docker save` writes since Docker 25 and `podman save --format oci-archive`
// writes) or a Docker archive (`docker save` before 25, `podman save`).
// Nothing is fetched: the image is a local file or folder.
//
// Every blob is checked against its digest and every layer against the
// config's diff_ids before its files count, and the result is cached by
// the image's digest, so a second sandbox from the same image unpacks
// nothing. The image is hostile input: an entry may not leave the folder
// or pass through a symlink, device nodes are not created, set-id bits
// are dropped, and the bytes and entries unpacked are bounded.
package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// Limits on what one image may unpack to.
const (
	MaxBytes   = 16 << 30 // file content, all layers together
	MaxEntries = 1 << 21  // tar entries, all layers together
	maxJSON    = 4 << 20  // index, manifest and config documents
)

// The limits in force; tests lower them.
var (
	maxBytes   int64 = MaxBytes
	maxEntries       = MaxEntries
)

// Unpacked is an image made into a root filesystem.
type Unpacked struct {
	Dir    string // the root filesystem: cache/<digest hex>
	Digest string // the image's digest: its manifest's (OCI) or its config's (Docker archive)
	Cached bool   // Dir was there already: nothing was unpacked
}

// IsImage reports whether src looks like an image rather than a root
// filesystem folder: a file (an archive), or a folder holding an OCI
// layout's index.json and no usr folder.
func IsImage(src string) bool {
	fi, err := os.Stat(src)
	if err != nil {
		return false
	}
	if fi.Mode().IsRegular() {
		return true
	}
	if _, err := os.Lstat(filepath.Join(src, "usr")); err == nil {
		return false
	}
	_, err = os.Stat(filepath.Join(src, "index.json"))
	return err == nil
}

// Unpack makes src (an OCI layout folder, or an OCI or Docker archive)
// into a root filesystem below cache, or finds it there.
func Unpack(src, cache string) (*Unpacked, error) {
	st, err := openStore(src)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", src, err)
	}
	defer st.close()
	img, err := st.resolve()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", src, err)
	}
	hex := strings.TrimPrefix(img.digest, "sha256:")
	dir := filepath.Join(cache, hex)
	if _, err := os.Stat(filepath.Join(dir, doneMarker)); err == nil {
		return &Unpacked{Dir: dir, Digest: img.digest, Cached: true}, nil
	}
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return nil, fmt.Errorf("image cache %s: %w", cache, err)
	}
	tmp, err := os.MkdirTemp(cache, ".unpack-")
	if err != nil {
		return nil, fmt.Errorf("image cache %s: %w", cache, err)
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	x := &extractor{root: root}
	for i, l := range img.layers {
		if err := x.layer(st, l, img.diffIDs[i]); err != nil {
			return nil, fmt.Errorf("image %s: layer %d (%s): %w", src, i+1, l.Digest, err)
		}
	}
	if err := x.finish(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, doneMarker), []byte(img.digest+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(root, dir); err != nil {
		// Another unpack of the same image won the race: use its result.
		if _, serr := os.Stat(filepath.Join(dir, doneMarker)); serr == nil {
			return &Unpacked{Dir: dir, Digest: img.digest, Cached: true}, nil
		}
		return nil, fmt.Errorf("image cache %s: %w", dir, err)
	}
	return &Unpacked{Dir: dir, Digest: img.digest}, nil
}

// doneMarker is written last into an unpacked root: a folder without it
// is an unpack that did not finish and is never used.
const doneMarker = ".airlock-image"

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// image is what resolve found: the layers in order with the uncompressed
// digests the config promises for them.
type image struct {
	digest  string
	layers  []descriptor
	diffIDs []string
}

// Media types that mean "an index" and the layer encodings understood.
const (
	mediaIndex       = "application/vnd.oci.image.index.v1+json"
	mediaDockerList  = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaDockerManif = "application/vnd.docker.distribution.manifest.v2+json"
)

// resolve reads the layout's index (or the archive's manifest.json) and
// the one manifest and config it names for this machine.
func (st *store) resolve() (*image, error) {
	if st.has("index.json") {
		b, err := st.readAll("index.json", maxJSON)
		if err != nil {
			return nil, err
		}
		return st.fromIndex(b, 0)
	}
	if st.has("manifest.json") {
		return st.fromDockerArchive()
	}
	return nil, errors.New("neither an OCI image layout (index.json) nor a Docker archive (manifest.json): give a folder made by skopeo or podman save --format oci-dir, or a file made by docker save or podman save")
}

// fromIndex picks the manifest for this machine from an index; nested
// indexes are followed once.
func (st *store) fromIndex(b []byte, depth int) (*image, error) {
	var idx struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	var picked []descriptor
	for _, m := range idx.Manifests {
		if m.Platform == nil || m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
			picked = append(picked, m)
		}
	}
	if len(picked) != 1 {
		return nil, fmt.Errorf("the index lists %d manifests for linux/%s: save one image (one platform) into the layout", len(picked), runtime.GOARCH)
	}
	m := picked[0]
	body, err := st.blob(m, maxJSON)
	if err != nil {
		return nil, err
	}
	switch m.MediaType {
	case mediaIndex, mediaDockerList:
		if depth > 0 {
			return nil, errors.New("an index inside an index inside an index: save one image into the layout")
		}
		return st.fromIndex(body, depth+1)
	case mediaManifest, mediaDockerManif, "":
	default:
		return nil, fmt.Errorf("manifest media type %q is not an image manifest", m.MediaType)
	}
	var man struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(body, &man); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", m.Digest, err)
	}
	cfg, err := st.blob(man.Config, maxJSON)
	if err != nil {
		return nil, err
	}
	diffs, err := diffIDs(cfg, len(man.Layers))
	if err != nil {
		return nil, err
	}
	return &image{digest: m.Digest, layers: man.Layers, diffIDs: diffs}, nil
}

// fromDockerArchive reads a Docker archive: manifest.json names the config
// and the layer files; the image's digest is its config's (Docker's image
// ID), and the config's diff_ids check the layers.
func (st *store) fromDockerArchive() (*image, error) {
	b, err := st.readAll("manifest.json", maxJSON)
	if err != nil {
		return nil, err
	}
	var ms []struct {
		Config string   `json:"Config"`
		Layers []string `json:"Layers"`
	}
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(ms) != 1 {
		return nil, fmt.Errorf("the archive holds %d images: save one image", len(ms))
	}
	cfg, err := st.readAll(ms[0].Config, maxJSON)
	if err != nil {
		return nil, err
	}
	diffs, err := diffIDs(cfg, len(ms[0].Layers))
	if err != nil {
		return nil, err
	}
	img := &image{digest: digestOf(cfg), diffIDs: diffs}
	for _, l := range ms[0].Layers {
		img.layers = append(img.layers, descriptor{Digest: "file:" + l})
	}
	return img, nil
}

// diffIDs returns the config's rootfs.diff_ids, one per layer.
func diffIDs(cfg []byte, layers int) ([]string, error) {
	var c struct {
		OS     string `json:"os"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if c.OS != "" && c.OS != "linux" {
		return nil, fmt.Errorf("the image is for %s, not linux", c.OS)
	}
	if len(c.RootFS.DiffIDs) != layers {
		return nil, fmt.Errorf("the config lists %d diff_ids for %d layers", len(c.RootFS.DiffIDs), layers)
	}
	for _, d := range c.RootFS.DiffIDs {
		if !validDigest(d) {
			return nil, fmt.Errorf("diff_id %q is not a sha256 digest", d)
		}
	}
	return c.RootFS.DiffIDs, nil
}

// validDigest reports whether d is sha256: and 64 lowercase hex digits.
func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// blobPath is where a layout keeps the blob of digest d.
func blobPath(d string) (string, error) {
	if !validDigest(d) {
		return "", fmt.Errorf("digest %q is not a sha256 digest", d)
	}
	return path.Join("blobs", "sha256", strings.TrimPrefix(d, "sha256:")), nil
}

// blob reads a small blob whole, checking its size and digest.
func (st *store) blob(d descriptor, max int64) ([]byte, error) {
	p, err := blobPath(d.Digest)
	if err != nil {
		return nil, err
	}
	if d.Size < 0 || d.Size > max {
		return nil, fmt.Errorf("blob %s: size %d is over the %d bytes a document may have", d.Digest, d.Size, max)
	}
	b, err := st.readAll(p, max)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != d.Size || digestOf(b) != d.Digest {
		return nil, fmt.Errorf("blob %s does not match its digest or size: the image is damaged or was altered", d.Digest)
	}
	return b, nil
}

// readAll reads a named file of the store, at most max bytes.
func (st *store) readAll(name string, max int64) ([]byte, error) {
	r, err := st.open(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is over %d bytes", name, max)
	}
	return b, nil
}
