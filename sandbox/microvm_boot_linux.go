package sandbox

import (
	"cmp"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/internal/initramfs"
)

// What a microVM boots: the guest kernel, found in /boot with its module
// tree, extracted once to boot uncompressed, and the initramfs built once
// per init binary, both cached in microvmCache.

// guestKernel is a kernel the guest can boot, with the module tree that
// matches it.
type guestKernel struct {
	version string // uname -r of the guest
	image   string // /boot/vmlinuz-VERSION
	modules string // /lib/modules/VERSION
	// boot is what QEMU boots: the uncompressed kernel (microvmVmlinux),
	// or image.
	boot string
}

// findGuestKernel picks the newest installed Debian kernel whose module
// tree has the 9p modules (linux-image-amd64; the cloud flavour has none).
func findGuestKernel() (guestKernel, error) {
	images, _ := filepath.Glob("/boot/vmlinuz-*")
	slices.Sort(images)
	var without []string
	for i := len(images) - 1; i >= 0; i-- {
		v := strings.TrimPrefix(images[i], "/boot/vmlinuz-")
		mods := filepath.Join("/lib/modules", v)
		if _, err := os.Stat(filepath.Join(mods, "kernel/fs/9p/9p.ko")); err != nil {
			without = append(without, v)
			continue
		}
		return guestKernel{version: v, image: images[i], modules: mods}, nil
	}
	if len(without) > 0 {
		return guestKernel{}, fmt.Errorf("isolation microvm: no guest kernel with the 9p modules (installed: %s, which lack them): apt-get install linux-image-amd64", strings.Join(without, ", "))
	}
	return guestKernel{}, errors.New("isolation microvm: no guest kernel in /boot: apt-get install linux-image-amd64 qemu-system-x86")
}

// microvmInitramfs returns the guest's initramfs for the init binary and
// kernel k, built once into microvmCache (named by their digest).
func microvmInitramfs(exe string, k guestKernel) (string, error) {
	f, err := openInit(exe)
	if err != nil {
		return "", fmt.Errorf("sandbox init binary: %w", err)
	}
	if f == nil {
		if f, err = os.Open("/proc/self/exe"); err != nil {
			return "", err
		}
	}
	defer f.Close()
	if err := checkStatic(f); err != nil {
		return "", err
	}
	h := sha256.New()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, st.Size())); err != nil {
		return "", err
	}
	fmt.Fprintf(h, "\x00%s\x00%s", k.version, strings.Join(microvmModules, ","))
	if err := os.MkdirAll(microvmCache, 0o755); err != nil {
		return "", fmt.Errorf("microvm cache %s: %w", microvmCache, err)
	}
	out := filepath.Join(microvmCache, "initramfs-"+hex.EncodeToString(h.Sum(nil))[:32]+".cpio")
	if _, err := os.Stat(out); err == nil {
		now := time.Now()
		_ = os.Chtimes(out, now, now) // the most recently used are kept (pruneInitramfs)
		return out, nil
	}
	defer pruneInitramfs(out)
	tmp, err := os.CreateTemp(microvmCache, ".initramfs-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	err = initramfs.Build(tmp, initramfs.Image{Init: f, InitSize: st.Size(), Modules: os.DirFS(k.modules), Want: microvmModules, ModuleList: nsinit.GuestModules})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	if err != nil {
		return "", fmt.Errorf("build the guest's initramfs: %w", err)
	}
	return out, nil
}

// microvmVmlinux returns the uncompressed kernel of k, extracted once
// into the cache (initramfs.Vmlinux: QEMU boots it through its PVH entry,
// which saves the seconds the bzImage spends decompressing itself under
// emulation), or the bzImage itself when it cannot be extracted.
func microvmVmlinux(k guestKernel) string {
	f, err := os.Open(k.image)
	if err != nil {
		return k.image // QEMU names the error
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return k.image
	}
	out := filepath.Join(microvmCache, fmt.Sprintf("vmlinux-%s-%d-%d", k.version, st.Size(), st.ModTime().Unix()))
	if _, err := os.Stat(out); err == nil {
		return out
	}
	tmp, err := os.CreateTemp(microvmCache, ".vmlinux-")
	if err != nil {
		return k.image
	}
	defer os.Remove(tmp.Name())
	err = initramfs.Vmlinux(f, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	if err != nil {
		return k.image // slower, not weaker
	}
	if old, _ := filepath.Glob(filepath.Join(microvmCache, "vmlinux-"+k.version+"-*")); len(old) > 1 {
		for _, p := range old {
			if p != out {
				_ = os.Remove(p) // an earlier build of this release
			}
		}
	}
	return out
}

// microvmKeep is how many initramfs images the cache keeps: one per
// airlock-init build, so a developer's rebuilds do not fill the disk.
const microvmKeep = 8

// pruneInitramfs removes all but the microvmKeep most recently used
// images of the cache, never keep.
func pruneInitramfs(keep string) {
	imgs, _ := filepath.Glob(filepath.Join(microvmCache, "initramfs-*.cpio"))
	if len(imgs) <= microvmKeep {
		return
	}
	mtime := func(p string) int64 {
		if fi, err := os.Stat(p); err == nil {
			return fi.ModTime().UnixNano()
		}
		return 0
	}
	slices.SortFunc(imgs, func(a, b string) int { return cmp.Compare(mtime(b), mtime(a)) })
	for _, p := range imgs[microvmKeep:] {
		if p != keep {
			_ = os.Remove(p) // another run may use it now: it keeps its open file
		}
	}
}

// checkStatic refuses an init binary that needs a dynamic loader: the
// initramfs holds nothing else.
func checkStatic(f *os.File) error {
	ef, err := elf.NewFile(f)
	if err != nil {
		return fmt.Errorf("sandbox init binary %s: %w", f.Name(), err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("sandbox init binary %s is dynamically linked, and the microVM's initramfs holds no loader: build airlock and airlock-init with CGO_ENABLED=0", f.Name())
		}
	}
	return nil
}

// guestCmdline is the guest kernel's command line. Under software
// emulation on a loaded host the kernel's TSC calibration against the PIT
// fails now and then, and the boot then hangs with no clock: the TSC's
// rate is given instead (TCG's guest TSC runs at the host's), and the
// timer check that also times the PIT is skipped.
func guestCmdline() string {
	c := "console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check tsc=reliable rdinit=" + nsinit.GuestInit
	if khz := hostTSCkHz(); khz > 0 {
		c += " tsc_early_khz=" + strconv.Itoa(khz)
	}
	return c
}

// hostTSCkHz is the host CPU's clock in kHz from /proc/cpuinfo, or 0.
func hostTSCkHz() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && mhz > 0 {
				return int(mhz * 1000)
			}
		}
	}
	return 0
}
