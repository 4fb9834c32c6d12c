package k8s

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/airlock-sandbox/airlock/plan"
)

// Volume says what backs one fs_read or fs_write grant in the Pod: the
// data a grant means lives somewhere only the operator knows, so the
// export backs no grant by itself. The zero Volume backs nothing and
// Export refuses it; exactly one field must be set.
type Volume struct {
	// Claim names an existing PersistentVolumeClaim in the Pod's
	// namespace, mounted at the grant's path: read-only (volume and
	// mount) for fs_read, writable for fs_write. It is a parameter of the
	// export, which the YAML header lists. Empty means no claim.
	Claim string

	// New asks the export to define a new, empty PersistentVolumeClaim of
	// this size (a Kubernetes quantity in canonical form, such as "1Gi")
	// for an fs_write grant: a place for what the sandbox writes, which
	// outlives the Pod. The cluster's default StorageClass provisions it.
	// fs_read grants cannot have one: it would be empty. Empty means no
	// new claim.
	New string

	// Image says the image already holds the grant's path, so nothing is
	// mounted there. Only fs_read grants may say so: the Pod's root
	// filesystem is read-only. False means the grant needs a claim.
	Image bool
}

// String returns v as the right-hand side of ParseVolume's form:
// "claim:NAME", "new:SIZE" or "image" ("" for the zero Volume).
func (v Volume) String() string {
	switch {
	case v.Claim != "":
		return "claim:" + v.Claim
	case v.New != "":
		return "new:" + v.New
	case v.Image:
		return "image"
	}
	return ""
}

// ParseVolume parses "PATH=claim:NAME", "PATH=new:SIZE" or "PATH=image",
// the form of `airlock export k8s --volume`, into the grant path and its
// Volume. PATH must be absolute and clean (no trailing '/', '.' or '..'),
// as the plan has it, so that it names exactly one grant. SIZE is a
// Kubernetes quantity above zero; New holds its canonical form.
func ParseVolume(s string) (string, Volume, error) {
	i := strings.LastIndexByte(s, '=') // claim names, sizes and "image" hold no '='
	if i < 0 {
		return "", Volume{}, fmt.Errorf("k8s: volume %q: want PATH=claim:NAME (an existing PersistentVolumeClaim), PATH=new:SIZE (a new claim the export defines) or PATH=image (the image holds PATH)", s)
	}
	p, src := s[:i], s[i+1:]
	if !path.IsAbs(p) || path.Clean(p) != p {
		return "", Volume{}, fmt.Errorf("k8s: volume %q: path %q: give the grant's absolute, clean path as `airlock explain` prints it", s, p)
	}
	if size, ok := strings.CutPrefix(src, "new:"); ok {
		q, err := parseSize(size)
		if err != nil {
			return "", Volume{}, fmt.Errorf("k8s: volume %q: %w", s, err)
		}
		return p, Volume{New: q}, nil
	}
	switch name, ok := strings.CutPrefix(src, "claim:"); {
	case src == "image":
		return p, Volume{Image: true}, nil
	case !ok:
		return "", Volume{}, fmt.Errorf("k8s: volume %q: source %q: want claim:NAME, new:SIZE or image", s, src)
	default:
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return "", Volume{}, fmt.Errorf("k8s: volume %q: claim name %q: %s", s, name, strings.Join(errs, "; "))
		}
		return p, Volume{Claim: name}, nil
	}
}

// parseSize returns the canonical form of a claim size above zero.
func parseSize(s string) (string, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 {
		return "", fmt.Errorf("size %q: give a storage size above zero, such as 1Gi or 500Mi", s)
	}
	return q.String(), nil
}

// grantVolumes returns the Pod's volumes and mounts for the plan's fs_read
// and fs_write grants, backed as o.Volumes says (every grant needs an
// entry and every entry must name a grant), and the claims the export
// defines for New volumes.
func grantVolumes(o Options, pl *plan.Plan) ([]corev1.Volume, []corev1.VolumeMount, []*corev1.PersistentVolumeClaim, error) {
	var (
		out    []corev1.Volume
		mounts []corev1.VolumeMount
		claims []*corev1.PersistentVolumeClaim
		errs   []error
		grants []string
	)
	vols := o.Volumes
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
		set := 0
		for _, b := range []bool{v.Claim != "", v.New != "", v.Image} {
			if b {
				set++
			}
		}
		switch {
		case !ok || set == 0:
			hint := fmt.Sprintf(", or --volume %s=image if the image holds it", m.Target)
			if m.Writable {
				hint = fmt.Sprintf(", or have the export define a new, empty one (--volume %s=new:SIZE)", m.Target)
			}
			errs = append(errs, fmt.Errorf("k8s: export: %s grant %s has no volume: name the existing PersistentVolumeClaim that holds it (--volume %s=claim:NAME)%s", grant, m.Target, m.Target, hint))
		case set > 1:
			errs = append(errs, fmt.Errorf("k8s: export: %s grant %s: a volume is one of an existing claim, a new claim or the image, not several", grant, m.Target))
		case v.New != "" && !m.Writable:
			errs = append(errs, fmt.Errorf("k8s: export: fs_read grant %s cannot be a new claim: it would be empty; name the existing PersistentVolumeClaim that holds it (--volume %s=claim:NAME)", m.Target, m.Target))
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
			claim := v.Claim
			if v.New != "" {
				c, err := newClaim(o, o.Name+"-"+name, v.New)
				if err != nil {
					errs = append(errs, fmt.Errorf("k8s: export: %s grant %s: %w", grant, m.Target, err))
					continue
				}
				claims = append(claims, c)
				claim = c.Name
			}
			out = append(out, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: claim, ReadOnly: !m.Writable}}})
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
	return out, mounts, claims, errors.Join(errs...)
}

// newClaim is the PersistentVolumeClaim of a New volume: ReadWriteOnce
// (the one Pod writes it), no storageClassName (the cluster's default
// StorageClass provisions it).
func newClaim(o Options, name, size string) (*corev1.PersistentVolumeClaim, error) {
	q, err := resource.ParseQuantity(size)
	if err != nil || q.Sign() <= 0 {
		return nil, fmt.Errorf("new claim size %q: give a storage size above zero, such as 1Gi", size)
	}
	return &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: meta(o, name, labels(o, "sandbox-volume")),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q}},
		},
	}, nil
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
