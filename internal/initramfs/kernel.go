package initramfs

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// maxVmlinux bounds the uncompressed kernel (Debian's 6.1 is 66 MB).
const maxVmlinux = 512 << 20

// Vmlinux extracts the uncompressed kernel (an ELF file) from a bzImage
// and checks that it can be booted directly: it carries the PVH entry
// note (XEN_ELFNOTE_PHYS32_ENTRY), which QEMU's microvm machine uses to
// jump straight into it. Under software emulation the bzImage's own xz
// decompression costs seconds per boot; done once here, it costs none.
//
// The bzImage layout is the x86 boot protocol's
// (Documentation/arch/x86/boot.rst): the setup sectors, then the
// protected-mode code whose payload_offset and payload_length (boot
// protocol 2.08+) locate the compressed kernel.
func Vmlinux(bz io.ReaderAt, w io.Writer) error {
	var hdr [0x250]byte
	if _, err := bz.ReadAt(hdr[:], 0); err != nil {
		return fmt.Errorf("kernel image: read the boot header: %w", err)
	}
	if string(hdr[0x202:0x206]) != "HdrS" {
		return errors.New("kernel image: no x86 boot header (HdrS): not a bzImage")
	}
	if v := binary.LittleEndian.Uint16(hdr[0x206:]); v < 0x208 {
		return fmt.Errorf("kernel image: boot protocol %#x has no payload fields (2.08+)", v)
	}
	setup := int64(hdr[0x1f1])
	if setup == 0 {
		setup = 4
	}
	off := (setup+1)*512 + int64(binary.LittleEndian.Uint32(hdr[0x248:]))
	n := int64(binary.LittleEndian.Uint32(hdr[0x24c:]))
	payload := io.NewSectionReader(bz, off, n)
	var magic [6]byte
	if _, err := payload.ReadAt(magic[:], 0); err != nil {
		return fmt.Errorf("kernel image: read the payload: %w", err)
	}
	var kernel []byte
	switch {
	case bytes.Equal(magic[:], []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		k, err := unxzKernel(payload, maxVmlinux)
		if err != nil {
			return fmt.Errorf("kernel image: %w", err)
		}
		kernel = k
	case magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(payload)
		if err != nil {
			return fmt.Errorf("kernel image: %w", err)
		}
		if kernel, err = io.ReadAll(io.LimitReader(zr, maxVmlinux+1)); err != nil {
			return fmt.Errorf("kernel image: gunzip: %w", err)
		}
		if len(kernel) > maxVmlinux {
			return fmt.Errorf("kernel image: more than %d bytes uncompressed", maxVmlinux)
		}
	default:
		return fmt.Errorf("kernel image: payload compressed with %x, which airlock cannot unpack (xz and gzip only)", magic)
	}
	if err := checkPVH(kernel); err != nil {
		return err
	}
	_, err := w.Write(kernel)
	return err
}

// checkPVH reports whether an ELF kernel has the PVH entry note.
func checkPVH(b []byte) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("kernel image: the payload is not ELF: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return err
		}
		for len(notes) >= 12 {
			nameSz, descSz, typ := binary.LittleEndian.Uint32(notes), binary.LittleEndian.Uint32(notes[4:]), binary.LittleEndian.Uint32(notes[8:])
			align := func(x uint32) int { return int((x + 3) &^ 3) }
			if 12+align(nameSz)+align(descSz) > len(notes) {
				break
			}
			name := string(bytes.TrimRight(notes[12:12+nameSz], "\x00"))
			if name == "Xen" && typ == 18 { // XEN_ELFNOTE_PHYS32_ENTRY
				return nil
			}
			notes = notes[12+align(nameSz)+align(descSz):]
		}
	}
	return errors.New("kernel image: no PVH entry note (the kernel was built without CONFIG_PVH)")
}
