package spec

import (
	"errors"
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/wire/wiretest"
)

// TestWireLayout: the encoding's layout is the types' own. A field added
// to Plan (or to a type in it) fails here until MarshalBinary,
// UnmarshalBinary and wireLayout carry it.
func TestWireLayout(t *testing.T) {
	if got := wiretest.Layout(reflect.TypeFor[Plan]()); got != wireLayout {
		t.Errorf("the plan's types changed: update MarshalBinary, UnmarshalBinary and wireLayout to\n%s", got)
	}
}

// TestWireEveryField: a plan with every field set comes back equal.
func TestWireEveryField(t *testing.T) {
	var p Plan
	wiretest.Fill(&p)
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var q Plan
	if err := q.UnmarshalBinary(b); err != nil {
		t.Fatalf("UnmarshalBinary: %v", err)
	}
	if !reflect.DeepEqual(p, q) {
		t.Errorf("round trip changed the plan:\nsent %+v\ngot  %+v", p, q)
	}
}

// TestWireRefusesDamage: every truncation of a plan, a byte flipped in its
// header and trailing bytes are refused with an error, never a panic or a
// partial plan.
func TestWireRefusesDamage(t *testing.T) {
	var p Plan
	wiretest.Fill(&p)
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(b) {
		var q Plan
		if err := q.UnmarshalBinary(b[:i]); err == nil {
			t.Fatalf("UnmarshalBinary of the first %d of %d bytes = nil, want an error", i, len(b))
		}
		if !reflect.DeepEqual(q, Plan{}) {
			t.Fatalf("UnmarshalBinary of %d bytes changed the plan on error", i)
		}
	}
	other := append([]byte{}, b...)
	other[len("xairlock-plan ")] ^= 0xff // the layout checksum: another build
	var q Plan
	if err := q.UnmarshalBinary(other); !errors.Is(err, errWireBuild) {
		t.Errorf("UnmarshalBinary of another build's plan = %v, want %v", err, errWireBuild)
	}
	if err := q.UnmarshalBinary(append(b, 0)); err == nil {
		t.Error("UnmarshalBinary with a trailing byte = nil, want an error")
	}
}

// FuzzUnmarshalBinary: no input panics or allocates beyond its size, and
// what decodes encodes back to the same bytes.
func FuzzUnmarshalBinary(f *testing.F) {
	var p Plan
	wiretest.Fill(&p)
	b, _ := p.MarshalBinary()
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Fuzz(func(t *testing.T, in []byte) {
		var q Plan
		if err := q.UnmarshalBinary(in); err != nil {
			return
		}
		out, err := q.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var r Plan
		if err := r.UnmarshalBinary(out); err != nil || !reflect.DeepEqual(q, r) {
			t.Fatalf("a decoded plan does not survive a second round trip: %v", err)
		}
	})
}
