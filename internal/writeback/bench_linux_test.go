package writeback_test

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/writeback"
)

// BenchmarkWriteBack measures the copy back of a stage of 100 files of 4
// KiB in 10 folders and one of 4 MiB against its baseline in the same run:
// a plain recursive copy of the same tree (io.Copy, no check, as the
// caller).
func BenchmarkWriteBack(b *testing.B) {
	d := b.TempDir()
	upper := filepath.Join(d, "stage", "0", "upper")
	for i := range 100 {
		p := filepath.Join(upper, "dir"+strconv.Itoa(i%10), "f"+strconv.Itoa(i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat("x", 4096)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(upper, "big"), []byte(strings.Repeat("y", 4<<20)), 0o644); err != nil {
		b.Fatal(err)
	}
	n := 0
	fresh := func() string {
		b.StopTimer()
		defer b.StartTimer()
		n++
		host := filepath.Join(d, "host"+strconv.Itoa(n))
		if err := os.Mkdir(host, 0o755); err != nil {
			b.Fatal(err)
		}
		return host
	}
	b.Run("copy-back", func(b *testing.B) {
		sfd, err := unix.Open(filepath.Join(d, "stage"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(sfd)
		for b.Loop() {
			host := fresh()
			hfd, err := writeback.OpenHost(host)
			if err != nil {
				b.Fatal(err)
			}
			res, _ := writeback.WriteBack(writeback.Config{StageFD: sfd, Grants: []writeback.Grant{{Host: host, Stage: "0", HostFD: hfd}}, MaxBytes: 1 << 30})
			unix.Close(hfd)
			if !res.Complete || res.Files != 101 {
				b.Fatalf("result = %+v", res)
			}
		}
	})
	b.Run("baseline-plain-copy", func(b *testing.B) {
		for b.Loop() {
			if err := plainCopy(upper, fresh()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// plainCopy copies the tree src into dst with no check at all.
func plainCopy(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, fi.Mode().Perm())
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
