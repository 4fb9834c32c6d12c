package wire_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/wire"
)

func TestRoundTrip(t *testing.T) {
	var e wire.Encoder
	e.Uint(1 << 40)
	e.Int(-5)
	e.Bool(true)
	e.String("héllo")
	e.Strings([]string{"a", "", "c"})
	e.Strings(nil)
	e.Uint(1<<32 - 1)
	d := wire.NewDecoder(e.Bytes())
	if u, i, b, s := d.Uint(), d.Int(), d.Bool(), d.String(); u != 1<<40 || i != -5 || !b || s != "héllo" {
		t.Errorf("got %d %d %v %q", u, i, b, s)
	}
	if ss := d.Strings(); !slices.Equal(ss, []string{"a", "", "c"}) {
		t.Errorf("Strings = %q", ss)
	}
	if ss := d.Strings(); ss != nil {
		t.Errorf("empty Strings = %q, want nil", ss)
	}
	if v := d.Uint32(); v != 1<<32-1 {
		t.Errorf("Uint32 = %d", v)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish = %v", err)
	}
}

// TestDecoderRefuses: a length or count past the input's end, a bool that
// is not 0 or 1, a 32-bit value that does not fit and trailing bytes are
// errors; after the first error every read is zero.
func TestDecoderRefuses(t *testing.T) {
	big := func() []byte { var e wire.Encoder; e.Uint(1 << 40); return e.Bytes() }()
	tests := []struct {
		name string
		in   []byte
		read func(*wire.Decoder)
	}{
		{"string-past-end", []byte{5, 'a', 'b'}, func(d *wire.Decoder) { _ = d.String() }},
		{"huge-count", big, func(d *wire.Decoder) { d.Count() }},
		{"huge-strings", big, func(d *wire.Decoder) { d.Strings() }},
		{"count-past-end", []byte{3, 0, 0}, func(d *wire.Decoder) { d.Strings() }},
		{"bool-2", []byte{2}, func(d *wire.Decoder) { d.Bool() }},
		{"empty-uint", nil, func(d *wire.Decoder) { d.Uint() }},
		{"uint32-overflow", big, func(d *wire.Decoder) { d.Uint32() }},
		{"trailing", []byte{1, 0}, func(d *wire.Decoder) { d.Bool() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := wire.NewDecoder(tt.in)
			tt.read(d)
			if err := d.Finish(); err == nil {
				t.Fatalf("Finish after reading %x = nil, want an error", tt.in)
			}
			if s := d.String(); s != "" || d.Uint() != 0 {
				t.Error("a read after an error returned a value")
			}
		})
	}
	d := wire.NewDecoder([]byte{5})
	_ = d.String()
	if !errors.Is(d.Err(), wire.ErrTruncated) {
		t.Errorf("Err = %v, want ErrTruncated", d.Err())
	}
}

func TestTag(t *testing.T) {
	if wire.Tag("x", "A{}") == wire.Tag("x", "A{B int}") {
		t.Error("two layouts share a tag")
	}
}
