package landlock

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestConstants checks the portable copies of the uapi values against
// golang.org/x/sys/unix.
func TestConstants(t *testing.T) {
	tests := []struct {
		name      string
		got, want uint64
	}{
		{"fs-execute", fsExecute, unix.LANDLOCK_ACCESS_FS_EXECUTE},
		{"fs-write-file", fsWriteFile, unix.LANDLOCK_ACCESS_FS_WRITE_FILE},
		{"fs-read-file", fsReadFile, unix.LANDLOCK_ACCESS_FS_READ_FILE},
		{"fs-read-dir", fsReadDir, unix.LANDLOCK_ACCESS_FS_READ_DIR},
		{"fs-remove-dir", fsRemoveDir, unix.LANDLOCK_ACCESS_FS_REMOVE_DIR},
		{"fs-remove-file", fsRemoveFile, unix.LANDLOCK_ACCESS_FS_REMOVE_FILE},
		{"fs-make-char", fsMakeChar, unix.LANDLOCK_ACCESS_FS_MAKE_CHAR},
		{"fs-make-dir", fsMakeDir, unix.LANDLOCK_ACCESS_FS_MAKE_DIR},
		{"fs-make-reg", fsMakeReg, unix.LANDLOCK_ACCESS_FS_MAKE_REG},
		{"fs-make-sock", fsMakeSock, unix.LANDLOCK_ACCESS_FS_MAKE_SOCK},
		{"fs-make-fifo", fsMakeFifo, unix.LANDLOCK_ACCESS_FS_MAKE_FIFO},
		{"fs-make-block", fsMakeBlock, unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK},
		{"fs-make-sym", fsMakeSym, unix.LANDLOCK_ACCESS_FS_MAKE_SYM},
		{"fs-refer", fsRefer, unix.LANDLOCK_ACCESS_FS_REFER},
		{"fs-truncate", fsTruncate, unix.LANDLOCK_ACCESS_FS_TRUNCATE},
		{"fs-ioctl-dev", fsIoctlDev, unix.LANDLOCK_ACCESS_FS_IOCTL_DEV},
		{"net-bind-tcp", netBindTCP, unix.LANDLOCK_ACCESS_NET_BIND_TCP},
		{"net-connect-tcp", netConnectTCP, unix.LANDLOCK_ACCESS_NET_CONNECT_TCP},
		{"scope-abstract-unix", scopeAbstractUnix, unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET},
		{"scope-signal", scopeSignal, unix.LANDLOCK_SCOPE_SIGNAL},
		{"log-new-exec-on", uint64(restrictLogNewExecOn), unix.LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %#x, want %#x", tt.name, tt.got, tt.want)
			}
		})
	}
}
