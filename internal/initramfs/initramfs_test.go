package initramfs_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/initramfs"
)

type entry struct {
	name string
	mode uint32
	data string
}

// parse reads a newc archive as the kernel does (init/initramfs.c): magic,
// 13 hex fields, the name and the data, each padded to 4 bytes, up to the
// trailer.
func parse(t *testing.T, b []byte) []entry {
	t.Helper()
	var out []entry
	for off := 0; ; {
		if len(b)-off < 110 || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		mode, size, nameLen := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+nameLen-1])
		off = (off + 110 + nameLen + 3) &^ 3
		data := string(b[off : off+size])
		off = (off + size + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, entry{name, uint32(mode), data})
	}
}

// TestWriter: what is written reads back in order with its mode and data,
// padded as the kernel expects.
func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w := initramfs.NewWriter(&buf)
	steps := []error{
		w.Dir("m", 0o755),
		w.File("init", 0o755, []byte("#!binary")),
		w.File("m/a.ko", 0o644, []byte("abcde")),
		w.FileFrom("m/b", 0o600, 3, strings.NewReader("xyz and more")),
		w.Symlink("m/link", "a.ko"),
		w.Close(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	got := parse(t, buf.Bytes())
	want := []entry{{"m", 0o040755, ""}, {"init", 0o100755, "#!binary"}, {"m/a.ko", 0o100644, "abcde"}, {"m/b", 0o100600, "xyz"}, {"m/link", 0o120777, "a.ko"}}
	if !slices.Equal(got, want) {
		t.Fatalf("archive = %+v, want %+v", got, want)
	}
}

// TestWriterRefuses: names that are not clean relative paths, duplicates,
// a file before its folder and a short reader are errors.
func TestWriterRefuses(t *testing.T) {
	tests := []struct {
		name string
		add  func(w *initramfs.Writer) error
	}{
		{"dotdot", func(w *initramfs.Writer) error { return w.File("../etc/passwd", 0o644, nil) }},
		{"dot", func(w *initramfs.Writer) error { return w.Dir(".", 0o755) }},
		{"unclean", func(w *initramfs.Writer) error { return w.File("a//b", 0o644, nil) }},
		{"empty", func(w *initramfs.Writer) error { return w.File("", 0o644, nil) }},
		{"trailer", func(w *initramfs.Writer) error { return w.File("TRAILER!!!", 0o644, nil) }},
		{"duplicate", func(w *initramfs.Writer) error { _ = w.File("a", 0o644, nil); return w.File("a", 0o644, nil) }},
		{"no-folder", func(w *initramfs.Writer) error { return w.File("m/a.ko", 0o644, nil) }},
		{"short-reader", func(w *initramfs.Writer) error { return w.FileFrom("a", 0o644, 10, strings.NewReader("abc")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.add(initramfs.NewWriter(&bytes.Buffer{})); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// TestModules resolves the guest's modules in the installed kernel's tree:
// every dependency comes before what needs it, and a module that does not
// exist is named.
func TestModules(t *testing.T) {
	trees, _ := filepath.Glob("/lib/modules/*/kernel/fs/9p/9p.ko")
	if len(trees) == 0 {
		airtest.SkipOrFail(t, "no kernel module tree with 9p (/lib/modules/*/kernel/fs/9p/9p.ko): apt-get install linux-image-amd64")
	}
	root := strings.TrimSuffix(trees[0], "/kernel/fs/9p/9p.ko")
	mods, err := initramfs.Modules(os.DirFS(root), []string{"virtio_mmio", "virtio_console", "9pnet_virtio", "9p"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range mods {
		names = append(names, m.Name)
	}
	pos := func(n string) int { return slices.Index(names, n) }
	for _, dep := range [][2]string{{"9pnet", "9pnet_virtio"}, {"9pnet", "9p"}, {"virtio_ring", "virtio_mmio"}, {"netfs", "9p"}} {
		if pos(dep[0]) < 0 || pos(dep[1]) < 0 || pos(dep[0]) > pos(dep[1]) {
			t.Errorf("modules %v: %s must come before %s", names, dep[0], dep[1])
		}
	}
	_, err = initramfs.Modules(os.DirFS(root), []string{"no_such_module"})
	if err == nil || !strings.Contains(err.Error(), "no_such_module") {
		t.Fatalf("Modules(no_such_module) = %v, want an error naming it", err)
	}
	var buf bytes.Buffer
	init := []byte("init-binary")
	if err := initramfs.Build(&buf, initramfs.Image{Init: bytes.NewReader(init), InitSize: int64(len(init)), Modules: os.DirFS(root), Want: []string{"9p"}, ModuleList: "/modules"}); err != nil {
		t.Fatal(err)
	}
	ents := parse(t, buf.Bytes())
	list := ents[len(ents)-1]
	if list.name != "modules" || !strings.HasSuffix(list.data, "/m/9p.ko\n") || !strings.Contains(list.data, "/m/9pnet.ko\n") {
		t.Fatalf("module list = %+v", list)
	}
}

// TestVmlinux extracts the installed guest kernel from its bzImage: the
// result is the ELF kernel with its PVH note, byte for byte what xz(1)
// makes of the payload (so the x86 branch filter is undone exactly).
func TestVmlinux(t *testing.T) {
	images, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(images) == 0 {
		airtest.SkipOrFail(t, "no kernel image in /boot: apt-get install linux-image-amd64")
	}
	f, err := os.Open(images[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got bytes.Buffer
	if err := initramfs.Vmlinux(f, &got); err != nil {
		t.Fatalf("Vmlinux(%s): %v", images[0], err)
	}
	if _, err := elf.NewFile(bytes.NewReader(got.Bytes())); err != nil {
		t.Fatalf("Vmlinux(%s) is not ELF: %v", images[0], err)
	}
	xzBin, err := exec.LookPath("xz")
	if err != nil {
		airtest.SkipOrFail(t, "xz(1) is not installed, to compare with: %v", err)
	}
	hdr := make([]byte, 0x250)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		t.Fatal(err)
	}
	setup := int64(hdr[0x1f1])
	if setup == 0 {
		setup = 4
	}
	off := (setup+1)*512 + int64(binary.LittleEndian.Uint32(hdr[0x248:]))
	cmd := exec.Command(xzBin, "-dc")
	cmd.Stdin = io.NewSectionReader(f, off, int64(binary.LittleEndian.Uint32(hdr[0x24c:])))
	want, err := cmd.Output()
	if err != nil {
		t.Skipf("xz -dc on %s's payload: %v (not xz-compressed?)", images[0], err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("Vmlinux(%s): %d bytes differ from xz -dc's %d", images[0], got.Len(), len(want))
	}
}

// TestVmlinuxRefuses: what is not a bzImage is refused.
func TestVmlinuxRefuses(t *testing.T) {
	if err := initramfs.Vmlinux(bytes.NewReader(make([]byte, 4096)), io.Discard); err == nil || !strings.Contains(err.Error(), "not a bzImage") {
		t.Fatalf("Vmlinux(zeros) = %v, want not a bzImage", err)
	}
}
