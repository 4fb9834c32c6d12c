package landlock

import (
	"fmt"
	"strings"
)

// Access is a set of abstract, policy-level rights on a path. The zero
// Access grants nothing and is refused by Compile.
type Access uint8

const (
	// Read allows reading files, and listing directories, beneath the path.
	Read Access = 1 << iota
	// Write allows writing, truncating, creating (except device nodes),
	// removing, renaming and linking beneath the path. It does not imply
	// Read.
	Write
	// Execute allows execve(2) of the file, or of files beneath the
	// directory. Grant it only on the exact tool files and the dynamic
	// loader.
	Execute

	accessAll = Read | Write | Execute
)

// String returns the rights as "read|write|execute", or "none".
func (a Access) String() string {
	var parts []string
	for _, n := range []struct {
		bit  Access
		name string
	}{{Read, "read"}, {Write, "write"}, {Execute, "execute"}} {
		if a&n.bit != 0 {
			parts = append(parts, n.name)
		}
	}
	if rest := a &^ accessAll; rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint8(rest)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Kind is the type of file a path rule lands on, found by fstat(2) when the
// rule is added. The kernel refuses directory-only rights on a non-directory
// (EINVAL), so the rights of a rule depend on it.
type Kind uint8

const (
	// Dir is a directory: rights apply to everything beneath it. It is the
	// zero Kind.
	Dir Kind = iota
	// File is a regular file, fifo, socket or anything else that is neither
	// a directory nor a device: only file rights apply.
	File
	// Device is a character or block device: file rights apply, and Write
	// also grants device ioctls.
	Device
)

// Landlock filesystem access bits, from include/uapi/linux/landlock.h. They
// are repeated here so that the portable half builds on every OS; a Linux
// test checks them against golang.org/x/sys/unix.
const (
	fsExecute    uint64 = 1 << 0  // ABI 1
	fsWriteFile  uint64 = 1 << 1  // ABI 1
	fsReadFile   uint64 = 1 << 2  // ABI 1
	fsReadDir    uint64 = 1 << 3  // ABI 1
	fsRemoveDir  uint64 = 1 << 4  // ABI 1
	fsRemoveFile uint64 = 1 << 5  // ABI 1
	fsMakeChar   uint64 = 1 << 6  // ABI 1
	fsMakeDir    uint64 = 1 << 7  // ABI 1
	fsMakeReg    uint64 = 1 << 8  // ABI 1
	fsMakeSock   uint64 = 1 << 9  // ABI 1
	fsMakeFifo   uint64 = 1 << 10 // ABI 1
	fsMakeBlock  uint64 = 1 << 11 // ABI 1
	fsMakeSym    uint64 = 1 << 12 // ABI 1
	fsRefer      uint64 = 1 << 13 // ABI 2
	fsTruncate   uint64 = 1 << 14 // ABI 3
	fsIoctlDev   uint64 = 1 << 15 // ABI 5

	// fsFileRights are the only rights the kernel accepts on a rule whose
	// path is not a directory (landlock_add_rule(2), EINVAL otherwise).
	fsFileRights = fsExecute | fsWriteFile | fsReadFile | fsTruncate | fsIoctlDev
)

// Landlock network access bits (ABI 4), scopes (ABI 6) and
// landlock_restrict_self(2) flags (ABI 7).
const (
	netBindTCP    uint64 = 1 << 0
	netConnectTCP uint64 = 1 << 1

	scopeAbstractUnix uint64 = 1 << 0
	scopeSignal       uint64 = 1 << 1

	restrictLogNewExecOn uint32 = 1 << 1
)

// MaxABI is the newest Landlock ABI this package knows. A newer kernel is
// treated as MaxABI: its additional rights are neither handled nor granted,
// exactly as on a kernel that stops at MaxABI.
const MaxABI = 7

// fsRights lists every filesystem right with the ABI that introduced it and
// the name Dropped uses.
var fsRights = []struct {
	bit  uint64
	abi  int
	name string
}{
	{fsExecute, 1, "fs.execute"},
	{fsWriteFile, 1, "fs.write_file"},
	{fsReadFile, 1, "fs.read_file"},
	{fsReadDir, 1, "fs.read_dir"},
	{fsRemoveDir, 1, "fs.remove_dir"},
	{fsRemoveFile, 1, "fs.remove_file"},
	{fsMakeChar, 1, "fs.make_char"},
	{fsMakeDir, 1, "fs.make_dir"},
	{fsMakeReg, 1, "fs.make_reg"},
	{fsMakeSock, 1, "fs.make_sock"},
	{fsMakeFifo, 1, "fs.make_fifo"},
	{fsMakeBlock, 1, "fs.make_block"},
	{fsMakeSym, 1, "fs.make_sym"},
	// Below ABI 2 the kernel refuses every rename or link across
	// directories, which is stricter than REFER: nothing is dropped.
	{fsRefer, 2, ""},
	{fsTruncate, 3, "fs.truncate"},
	{fsIoctlDev, 5, "fs.ioctl_dev"},
}

// handledFS returns every filesystem right that ABI abi supports.
func handledFS(abi int) uint64 {
	var m uint64
	for _, r := range fsRights {
		if abi >= r.abi {
			m |= r.bit
		}
	}
	return m
}

// fsAccess maps abstract rights on a path of kind k to Landlock bits, before
// masking with what the ABI handles. It is the table in the package doc.
func fsAccess(a Access, k Kind) uint64 {
	var m uint64
	if a&Read != 0 {
		m |= fsReadFile
		if k == Dir {
			m |= fsReadDir
		}
	}
	if a&Write != 0 {
		switch k {
		case Dir:
			// Never MAKE_CHAR or MAKE_BLOCK: a device node would bypass
			// every path rule. Never IOCTL_DEV on a directory: only the
			// devices listed one by one may be driven.
			m |= fsWriteFile | fsRemoveDir | fsRemoveFile | fsMakeDir | fsMakeReg |
				fsMakeSym | fsMakeFifo | fsMakeSock | fsTruncate | fsRefer
		case Device:
			m |= fsWriteFile | fsTruncate | fsIoctlDev
		default:
			m |= fsWriteFile | fsTruncate
		}
	}
	if a&Execute != 0 {
		m |= fsExecute
	}
	if k != Dir {
		m &= fsFileRights
	}
	return m
}
