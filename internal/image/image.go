package image

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Limits on what one image may unpack to.
const (
	MaxBytes   = 16 << 30 // file content, all layers together
	MaxEntries = 1 << 21  // tar entries, all layers together
	MaxLayers  = 256      // layers of one image
	MaxDepth   = 256      // folders above an entry
	MaxName    = 4096     // bytes of an entry's name or link target (PATH_MAX)
	// MaxDuration bounds one Unpack: its children are killed after it.
	MaxDuration = 30 * time.Minute
)

// Unpacked is an image made into a root filesystem.
type Unpacked struct {
	// Dir is the root filesystem: CACHE/<key hex>/rootfs.
	Dir string
	// Digest is the key: the digest of what was unpacked (Key), never
	// empty.
	Digest string
	// Cached says Dir was there already: nothing was unpacked.
	Cached bool
}

// Options say how Unpack runs its child.
type Options struct {
	// Executable is the binary re-executed as the unpack's child: one
	// whose main runs Child when argv[0] is ChildArg0 (sandbox.Init
	// does). It is executed through its fd. Nil means this program
	// (/proc/self/exe).
	Executable *os.File
}

// Kind says what an image's input was, as its key records it.
type Kind string

// The kinds of input.
const (
	KindOCI    Kind = "oci"    // an OCI image layout, or a tar of one
	KindDocker Kind = "docker" // a Docker archive
)

// Key returns the document that names what an image unpacks to (its kind,
// its config's digest, and its layers in order: each one's blob digest,
// as stored, and diff_id, uncompressed; and the version of the unpack's
// rules) and its digest, the cache key. The document is what the done
// marker of a cache entry holds. Every digest in it is of bytes Unpack
// read and checked itself.
func Key(kind Kind, config string, blobs, diffIDs []string) (doc, digest string) {
	var b strings.Builder
	fmt.Fprintf(&b, "airlock rootfs 3\nkind %s\nconfig %s\n", kind, config)
	for i, d := range blobs {
		diff := ""
		if i < len(diffIDs) {
			diff = diffIDs[i]
		}
		fmt.Fprintf(&b, "layer %s %s\n", d, diff)
	}
	doc = b.String()
	return doc, digestOf([]byte(doc))
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

// digestOf is the sha256 digest of b.
func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
