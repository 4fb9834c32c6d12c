package k8s

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/airlock-sandbox/airlock/plan"
)

// Volume says what backs one fs_read or fs_write grant in the Pod. The
// export defines no storage of its own for grants: the data a grant means
// lives somewhere only the operator knows. The zero Volume backs nothing
// and Export refuses it.
type Volume struct {
	// Claim names an existing PersistentVolumeClaim in the Pod's
	// namespace, mounted at the grant's path: read-only (volume and
	// mount) for fs_read, writable for fs_write. Empty means no claim.
	Claim string

	// Image says the image already holds the grant's path, so nothing is
	// mounted there. Only fs_read grants may say so: the Pod's root
	// filesystem is read-only. False means the grant needs a Claim.
	Image bool
}

// String returns v as the right-hand side of ParseVolume's form:
// "claim:NAME" or "image" ("" for the zero Volume).
func (v Volume) String() string {
	switch {
	case v.Claim != "":
		return "claim:" + v.Claim
	case v.Image:
		return "image"
	}
	return ""
}

// ParseVolume parses "PATH=claim:NAME" or "PATH=image", the form of
// `airlock export k8s --volume`, into the grant path and its Volume. PATH
// must be absolute and clean (no trailing '/', '.' or '..'), as the plan
// has it, so that it names exactly one grant.
func ParseVolume(s string) (string, Volume, error) {
	i := strings.LastIndexByte(s, '=') // claim names and "image" hold no '='
	if i < 0 {
		return "", Volume{}, fmt.Errorf("k8s: volume %q: want PATH=claim:NAME (an existing PersistentVolumeClaim) or PATH=image (the image holds PATH)", s)
	}
	p, src := s[:i], s[i+1:]
	if !path.IsAbs(p) || path.Clean(p) != p {
		return "", Volume{}, fmt.Errorf("k8s: volume %q: path %q: give the grant's absolute, clean path as `airlock explain` prints it", s, p)
	}
	switch name, ok := strings.CutPrefix(src, "claim:"); {
	case src == "image":
		return p, Volume{Image: true}, nil
	case !ok:
		return "", Volume{}, fmt.Errorf("k8s: volume %q: source %q: want claim:NAME or image", s, src)
	default:
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return "", Volume{}, fmt.Errorf("k8s: volume %q: claim name %q: %s", s, name, strings.Join(errs, "; "))
		}
		return p, Volume{Claim: name}, nil
	}
}

// grantVolumes returns the Pod's volumes and mounts for the plan's fs_read
// and fs_write grants, backed as vols says: every grant needs an entry
// and every entry must name a grant.
func grantVolumes(pl *plan.Plan, vols map[string]Volume) ([]corev1.Volume, []corev1.VolumeMount, error) {
	var (
		out    []corev1.Volume
		mounts []corev1.VolumeMount
		errs   []error
		grants []string
	)
	seen := map[string]bool{"tmp": true}
	used := map[string]bool{}
	for _, m := range pl.Mounts {
		if !m.Grant() {
			continue
		}
		grant := "fs_read"
		if m.Writable {
			grant = "fs_write"
		}
		grants = append(grants, m.Target)
		v, ok := vols[m.Target]
		used[m.Target] = true
		file := m.File || m.Kind == plan.KindStagedFile
		switch {
		case !ok || v == (Volume{}):
			hint := ""
			if !m.Writable {
				hint = fmt.Sprintf(", or --volume %s=image if the image holds it", m.Target)
			}
			errs = append(errs, fmt.Errorf("k8s: export: %s grant %s has no volume: name the existing PersistentVolumeClaim that holds it (--volume %s=claim:NAME)%s", grant, m.Target, m.Target, hint))
		case v.Claim != "" && v.Image:
			errs = append(errs, fmt.Errorf("k8s: export: %s grant %s: a volume is a claim or the image, not both", grant, m.Target))
		case v.Image && m.Writable:
			errs = append(errs, fmt.Errorf("k8s: export: fs_write grant %s cannot come from the image: the Pod's root filesystem is read-only; name a PersistentVolumeClaim (--volume %s=claim:NAME)", m.Target, m.Target))
		case v.Image:
			// The image's own files are the grant: nothing to mount.
		case file:
			errs = append(errs, fmt.Errorf("k8s: export: %s grant %s is a file, and a claim mounts a folder: grant the folder that holds it instead", grant, m.Target))
		default:
			prefix := "read-"
			if m.Writable {
				prefix = "write-"
			}
			name := volumeName(prefix, m.Target)
			for i := 2; seen[name]; i++ {
				name = volumeName(prefix, m.Target) + "-" + strconv.Itoa(i)
			}
			seen[name] = true
			out = append(out, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: v.Claim, ReadOnly: !m.Writable}}})
			mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.Target, ReadOnly: !m.Writable})
		}
	}
	var extra []string
	for p := range vols {
		if !used[p] {
			extra = append(extra, p)
		}
	}
	sort.Strings(extra)
	for _, p := range extra {
		list := "it grants none"
		if len(grants) > 0 {
			list = "its grants are " + strings.Join(grants, ", ")
		}
		errs = append(errs, fmt.Errorf("k8s: export: volume for %q: the policy grants no fs_read or fs_write at that path (%s)", p, list))
	}
	return out, mounts, errors.Join(errs...)
}

// volumeName derives a DNS-1123 label from a grant path: prefix, then the
// path's letters and digits joined by '-', cut to fit.
func volumeName(prefix, path string) string {
	var b strings.Builder
	b.WriteString(prefix)
	dash := true
	for _, c := range strings.ToLower(path) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.TrimRight(b.String(), "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	return s
}
