package hostspec

// This file implements the Punycode algorithm of RFC 3492, ported from
// golang.org/x/net/idna/punycode.go (BSD licence, The Go Authors). All
// arithmetic is int32 with explicit overflow checks, as in the original.

import (
	"errors"
	"math"
	"strings"
	"unicode/utf8"
)

// RFC 3492 section 5 parameters.
const (
	pcBase        int32 = 36
	pcDamp        int32 = 700
	pcInitialBias int32 = 72
	pcInitialN    int32 = 128
	pcSkew        int32 = 38
	pcTmax        int32 = 26
	pcTmin        int32 = 1
)

var errPunycode = errors.New("invalid punycode")

// punyDecode decodes the part of an A-label after "xn--" (RFC 3492 6.2).
func punyDecode(encoded string) (string, error) {
	if encoded == "" {
		return "", errPunycode
	}
	pos := 1 + strings.LastIndexByte(encoded, '-')
	if pos == 1 || pos == len(encoded) {
		return "", errPunycode
	}
	output := make([]rune, 0, len(encoded))
	if pos != 0 {
		for _, r := range encoded[:pos-1] {
			output = append(output, r)
		}
	}
	i, n, bias := int32(0), pcInitialN, pcInitialBias
	overflow := false
	for pos < len(encoded) {
		oldI, w := i, int32(1)
		for k := pcBase; ; k += pcBase {
			if pos == len(encoded) {
				return "", errPunycode
			}
			digit, ok := punyDecodeDigit(encoded[pos])
			if !ok {
				return "", errPunycode
			}
			pos++
			if i, overflow = madd(i, digit, w); overflow {
				return "", errPunycode
			}
			t := punyThreshold(k, bias)
			if digit < t {
				break
			}
			if w, overflow = madd(0, w, pcBase-t); overflow {
				return "", errPunycode
			}
		}
		if len(output) >= maxLabel {
			return "", errPunycode
		}
		x := int32(len(output) + 1)
		bias = punyAdapt(i-oldI, x, oldI == 0)
		n += i / x
		i %= x
		if n < 0 || n > utf8.MaxRune {
			return "", errPunycode
		}
		output = append(output, 0)
		copy(output[i+1:], output[i:])
		output[i] = n
		i++
	}
	return string(output), nil
}

// punyEncode returns "xn--" followed by the encoding of s (RFC 3492 6.3).
func punyEncode(s string) (string, error) {
	const prefix = "xn--"
	output := make([]byte, len(prefix), len(prefix)+1+2*len(s))
	copy(output, prefix)
	delta, n, bias := int32(0), pcInitialN, pcInitialBias
	b, remaining := int32(0), int32(0)
	for _, r := range s {
		if r < utf8.RuneSelf {
			b++
			output = append(output, byte(r))
		} else {
			remaining++
		}
	}
	h := b
	if b > 0 {
		output = append(output, '-')
	}
	overflow := false
	for remaining != 0 {
		m := int32(math.MaxInt32)
		for _, r := range s {
			if m > r && r >= n {
				m = r
			}
		}
		if delta, overflow = madd(delta, m-n, h+1); overflow {
			return "", errPunycode
		}
		n = m
		for _, r := range s {
			if r < n {
				delta++
				if delta < 0 {
					return "", errPunycode
				}
				continue
			}
			if r > n {
				continue
			}
			q := delta
			for k := pcBase; ; k += pcBase {
				t := punyThreshold(k, bias)
				if q < t {
					break
				}
				output = append(output, punyDigits[t+(q-t)%(pcBase-t)])
				q = (q - t) / (pcBase - t)
			}
			output = append(output, punyDigits[q])
			bias = punyAdapt(delta, h+1, h == b)
			delta = 0
			h++
			remaining--
		}
		delta++
		n++
	}
	return string(output), nil
}

const punyDigits = "abcdefghijklmnopqrstuvwxyz0123456789"

// punyThreshold is t(k) of RFC 3492 6.1, clamped to [tmin, tmax].
func punyThreshold(k, bias int32) int32 {
	switch {
	case k <= bias:
		return pcTmin
	case k >= bias+pcTmax:
		return pcTmax
	}
	return k - bias
}

// madd computes a + b*c and reports overflow of int32.
func madd(a, b, c int32) (next int32, overflow bool) {
	p := int64(b) * int64(c)
	if p > math.MaxInt32-int64(a) {
		return 0, true
	}
	return a + int32(p), false
}

// punyDecodeDigit accepts lowercase digits only: canonical A-labels are
// lowercase, and callers lowercase ASCII first.
func punyDecodeDigit(x byte) (digit int32, ok bool) {
	switch {
	case '0' <= x && x <= '9':
		return int32(x-'0') + 26, true
	case 'a' <= x && x <= 'z':
		return int32(x - 'a'), true
	}
	return 0, false
}

// punyAdapt is the bias adaptation function of RFC 3492 6.1.
func punyAdapt(delta, numPoints int32, firstTime bool) int32 {
	if firstTime {
		delta /= pcDamp
	} else {
		delta /= 2
	}
	delta += delta / numPoints
	k := int32(0)
	for delta > ((pcBase-pcTmin)*pcTmax)/2 {
		delta /= pcBase - pcTmin
		k += pcBase
	}
	return k + (pcBase-pcTmin+1)*delta/(delta+pcSkew)
}
