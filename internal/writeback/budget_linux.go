package writeback

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// The copy back is charged against max_write (Config.MaxBytes) for the
// room it takes on the host's disk: the blocks of every file, folder and
// symlink it writes (st_blocks), and the blocks the host folders it adds
// names to grow by. What the stage holds is no measure of that: a sparse
// file of 1 GiB holds a few pages there, five hard links to one file are
// five files on the host, and an empty folder takes no page of a tmpfs
// but a block of ext4. A file is checked before it is written, against
// the blocks its data will take, and again once written, against the
// blocks it took: over the budget, its temporary copy is removed and the
// file refused. A host folder grows when a name is added, after the
// check: the total can pass MaxBytes by that growth once (a block or two),
// and then nothing more is written. Holes are kept (lseek(2) SEEK_DATA,
// SEEK_HOLE; Linux 3.1): only the data is copied.

// keepsHoles lists the file systems (statfs(2) f_type) known to store a
// hole as a hole. On any other, a file is charged its full size.
var keepsHoles = map[int64]bool{
	unix.EXT4_SUPER_MAGIC: true, unix.XFS_SUPER_MAGIC: true, unix.BTRFS_SUPER_MAGIC: true,
	unix.TMPFS_MAGIC: true, unix.F2FS_SUPER_MAGIC: true, unix.BCACHEFS_SUPER_MAGIC: true,
}

// measure takes the block size of the grant's file system and whether it
// keeps holes.
func (w *writer) measure(hostFD int) {
	w.bsize, w.holes = 4096, false
	var fs unix.Statfs_t
	if unix.Fstatfs(hostFD, &fs) == nil {
		w.bsize = max(int64(fs.Bsize), 512)
		w.holes = keepsHoles[int64(fs.Type)]
	}
}

// cost is what a file of size bytes with data extents ext will take on
// the grant's disk: its data, block by block, or its whole size where
// holes are not kept.
func (w *writer) cost(ext []extent, size int64) int64 {
	if !w.holes {
		return roundUp(size, w.bsize)
	}
	var n int64
	for _, e := range ext {
		n += roundUp(e.end, w.bsize) - e.off/w.bsize*w.bsize
	}
	return n
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

// fits reports whether n more bytes on the host's disk stay within
// MaxBytes.
func (w *writer) fits(n int64) bool { return w.used+n <= w.cfg.MaxBytes }

func (w *writer) charge(n int64) { w.used += n }

// overBudget refuses path for needing n bytes more than are left.
func (w *writer) overBudget(path string, n int64) {
	w.res.refuseBy(w.max, RuleMaxWrite, path, fmt.Sprintf("over max_write: it takes %d bytes of the host's disk and %d of the run's %d are left (the copy back is charged for what it puts on the disk; raise max_write to keep it)",
		n, max(w.cfg.MaxBytes-w.used, 0), w.cfg.MaxBytes))
}

// admit charges the new entry tmp of host for the blocks it took, or
// refuses path when they do not fit; the caller removes tmp then.
func (w *writer) admit(host int, tmp, path string) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(host, tmp, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		w.res.fail(w.max, path, fmt.Errorf("stat the copy: %w", err))
		return false
	}
	if !w.fits(st.Blocks * 512) {
		w.overBudget(path, st.Blocks*512)
		return false
	}
	w.charge(st.Blocks * 512)
	return true
}

// blocks returns the bytes host folder fd takes (st_blocks), 0 when it
// cannot tell.
func blocks(fd int) int64 {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// chargeGrowth charges what host folder fd grew by since it took was
// bytes, and returns what it takes now.
func (w *writer) chargeGrowth(fd int, was int64) int64 {
	now := blocks(fd)
	if now > was {
		w.charge(now - was)
	}
	return max(now, was)
}

// extent is a range of a file that holds data: [off, end).
type extent struct{ off, end int64 }

// extents returns the data of fd up to size, holes left out. A file
// system that cannot tell (EINVAL) is all data.
func extents(fd int, size int64) ([]extent, error) {
	var ext []extent
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if errors.Is(err, unix.EINVAL) {
			return append(ext, extent{off, size}), nil
		}
		if err != nil {
			return nil, err
		}
		if data >= size {
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		hole = min(hole, size)
		if hole <= data {
			return nil, fmt.Errorf("lseek: a hole at %d before the data at %d", hole, data)
		}
		ext = append(ext, extent{data, hole})
		off = hole
	}
	return ext, nil
}

// copyBuf is the size of one read and write of copyExtents.
const copyBuf = 256 << 10

// copyExtents copies the extents ext of src to the same offsets of dst
// and makes dst size bytes long: what lies between them stays a hole. It
// returns the bytes it wrote.
func copyExtents(dst, src int, ext []extent, size int64) (int64, error) {
	buf := make([]byte, min(copyBuf, max(size, 1)))
	var n int64
	for _, e := range ext {
		for off := e.off; off < e.end; {
			r, err := unix.Pread(src, buf[:min(int64(len(buf)), e.end-off)], off)
			if err != nil {
				return n, fmt.Errorf("read the staged file: %w", err)
			}
			if r == 0 {
				return n, errors.New("read the staged file: it ended early")
			}
			for done := 0; done < r; {
				m, err := unix.Pwrite(dst, buf[done:r], off+int64(done))
				if err != nil {
					return n, err
				}
				if m == 0 {
					return n, io.ErrShortWrite
				}
				done += m
				n += int64(m)
			}
			off += int64(r)
		}
	}
	if err := unix.Ftruncate(dst, size); err != nil {
		return n, fmt.Errorf("truncate to %d bytes: %w", size, err)
	}
	return n, nil
}
