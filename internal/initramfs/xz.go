package initramfs

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// Linux compresses its x86 kernels with xz's x86 branch filter (BCJ)
// before LZMA2 (scripts/xz_wrap.sh), which the xz module's reader does not
// know. unxzKernel reads the first block of such a stream: its header's
// filter chain (x86 BCJ without a start offset, then LZMA2), the LZMA2
// data, and undoes the branch filter (bcjX86, as xz-embedded's
// xz_dec_bcj.c does). The integrity of the result is checked by the
// caller (an ELF file with the PVH note); the stream's index and check are
// not read.
func unxzKernel(r io.Reader, limit int64) ([]byte, error) {
	br := bufio.NewReader(r)
	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, fmt.Errorf("xz stream header: %w", err)
	}
	if string(hdr[:6]) != "\xfd7zXZ\x00" {
		return nil, errors.New("not an xz stream")
	}
	size, err := br.ReadByte()
	if err != nil || size == 0 {
		return nil, fmt.Errorf("xz block header: %v (size byte %d)", err, size)
	}
	bh := make([]byte, (int(size)+1)*4-1) // the rest of the header (its size counts the size byte), with its CRC32
	if _, err := io.ReadFull(br, bh); err != nil {
		return nil, fmt.Errorf("xz block header: %w", err)
	}
	p := bh[1:]
	flags := bh[0]
	varint := func() (uint64, error) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, errors.New("xz block header: bad number")
		}
		p = p[n:]
		return v, nil
	}
	for _, present := range []bool{flags&0x40 != 0, flags&0x80 != 0} { // compressed, uncompressed size
		if present {
			if _, err := varint(); err != nil {
				return nil, err
			}
		}
	}
	var dictCap int
	bcj := false
	for i := 0; i <= int(flags&3); i++ {
		id, err := varint()
		if err != nil {
			return nil, err
		}
		n, err := varint()
		if err != nil || uint64(len(p)) < n {
			return nil, errors.New("xz block header: bad filter properties")
		}
		props := p[:n]
		p = p[n:]
		switch {
		case id == 0x04 && n == 0 && i == 0: // x86 BCJ, start offset 0
			bcj = true
		case id == 0x21 && n == 1 && i == int(flags&3): // LZMA2, last
			d := props[0]
			if d > 40 {
				return nil, fmt.Errorf("xz: LZMA2 dictionary property %d", d)
			}
			if d == 40 {
				dictCap = 1<<32 - 1
			} else {
				dictCap = (2 | int(d&1)) << (d/2 + 11)
			}
		default:
			return nil, fmt.Errorf("xz: filter %#x (properties %d bytes) at position %d: only x86 BCJ then LZMA2 is read", id, n, i)
		}
	}
	if dictCap == 0 {
		return nil, errors.New("xz: the block has no LZMA2 filter")
	}
	lr, err := lzma.Reader2Config{DictCap: dictCap}.NewReader2(br)
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(lr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("xz: more than %d bytes uncompressed", limit)
	}
	if bcj {
		bcjX86(out)
	}
	return out, nil
}

// bcjX86 undoes xz's x86 branch filter on a whole buffer starting at
// offset 0: the relative targets of CALL and JMP (E8, E9) that the encoder
// made absolute become relative again.
func bcjX86(buf []byte) {
	allowed := [8]bool{true, true, true, false, true, false, false, false}
	bitNum := [8]uint32{0, 1, 2, 2, 3, 3, 3, 3}
	msb := func(b byte) bool { return b == 0x00 || b == 0xFF }
	if len(buf) <= 4 {
		return
	}
	size := len(buf) - 4
	prevPos := -1
	var prevMask uint32
	for i := 0; i < size; i++ {
		if buf[i]&0xFE != 0xE8 {
			continue
		}
		d := i - prevPos
		if d > 3 {
			prevMask = 0
		} else {
			prevMask = (prevMask << uint(d-1)) & 7
			if prevMask != 0 {
				b := buf[i+4-int(bitNum[prevMask])]
				if !allowed[prevMask] || msb(b) {
					prevPos = i
					prevMask = prevMask<<1 | 1
					continue
				}
			}
		}
		prevPos = i
		if !msb(buf[i+4]) {
			prevMask = prevMask<<1 | 1
			continue
		}
		src := binary.LittleEndian.Uint32(buf[i+1:])
		var dest uint32
		for {
			dest = src - uint32(i+5)
			if prevMask == 0 {
				break
			}
			j := bitNum[prevMask] * 8
			if !msb(byte(dest >> (24 - j))) {
				break
			}
			src = dest ^ (1<<(32-j) - 1)
		}
		dest &= 0x01FFFFFF
		dest |= 0 - (dest & 0x01000000)
		binary.LittleEndian.PutUint32(buf[i+1:], dest)
		i += 4
	}
}
