package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"runtime"
	"strings"
)

// Limits of the unpack's own.
const (
	maxJSON = 4 << 20 // index, manifest and config documents
	// maxTrailing is what a layer may hold after its tar's end: tar
	// writers pad to their record size (10240 bytes by default).
	maxTrailing = 1 << 20
	// maxNameBytes bounds the names the extractor keeps in memory (the
	// folders whose modes are set at the end, this layer's entries).
	maxNameBytes = 256 << 20
)

// The limits in force; tests lower them.
var (
	maxBytes   int64 = MaxBytes
	maxEntries       = MaxEntries
	maxDepth         = MaxDepth
)

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
	kind       Kind
	config     descriptor // the config's blob
	configName string     // its file in the store
	layers     []descriptor
	diffIDs    []string
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
	name, _ := blobPath(man.Config.Digest) // read above: a valid digest
	return &image{kind: KindOCI, config: man.Config, configName: name, layers: man.Layers, diffIDs: diffs}, nil
}

// fromDockerArchive reads a Docker archive: manifest.json names the config
// and the layer files, and the config's diff_ids check the layers. The
// layers have no digest of their own: proposal hashes their files.
func (st *store) fromDockerArchive() (*image, error) {
	if st.f == nil {
		return nil, errors.New("a folder holding a Docker archive's manifest.json: give the archive itself (the tar docker save wrote), or an OCI layout folder")
	}
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
	name, err := cleanName(ms[0].Config)
	if err != nil {
		return nil, err
	}
	img := &image{kind: KindDocker, config: descriptor{Digest: digestOf(cfg), Size: int64(len(cfg))}, configName: name, diffIDs: diffs}
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
	if layers > MaxLayers {
		return nil, fmt.Errorf("the image has %d layers, more than the %d airlock unpacks: squash it", layers, MaxLayers)
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
		return nil, fmt.Errorf("%q: %w", name, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%q is over %d bytes", name, max)
	}
	return b, nil
}
