package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/wire/wiretest"
	"github.com/airlock-sandbox/airlock/policy"
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

// nilEmpty replaces empty slices reachable from v with nil: the wire
// form, like a missing JSON list, does not tell them apart.
func nilEmpty(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				nilEmpty(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		for i := range v.Len() {
			nilEmpty(v.Index(i))
		}
	}
}

// TestWireCompiled: compiled plans, default and granted, come back equal.
func TestWireCompiled(t *testing.T) {
	for name, spec := range map[string]policy.Spec{
		"default": {},
		"grants": {FSRead: []string{"/data"}, FSWrite: []string{"/data/out"}, NetHosts: []string{"pypi.org", "*.pythonhosted.org:443"},
			AllowedTools: []string{"python3"}, Env: []string{"LANG", "MPLBACKEND=Agg"}},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := policy.New(spec)
			if err != nil {
				t.Fatal(err)
			}
			pl, err := Compile(p, Request{Argv: []string{"sh", "-c", "python3 job.py"}, CommandIsGranted: true}, wireHost{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := pl.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var q Plan
			if err := q.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			want := *pl
			nilEmpty(reflect.ValueOf(&want).Elem())
			if !reflect.DeepEqual(want, q) {
				t.Errorf("round trip changed the plan:\nsent %+v\ngot  %+v", want, q)
			}
		})
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

// wireHost is a Debian-like host for the compiled plans.
type wireHost struct{}

func (wireHost) Lstat(p string) (bool, bool, string, error) {
	switch p {
	case "/bin", "/lib", "/lib64", "/sbin":
		return true, false, "usr" + p, nil
	}
	return true, !strings.HasPrefix(p, "/usr/bin/"), "", nil
}

func (wireHost) LookTool(name string) (string, string, error) {
	if strings.HasPrefix(name, "/") {
		return name, name, nil
	}
	return "/usr/bin/" + name, "/usr/bin/" + name, nil
}

func (wireHost) Loader() []string { return []string{"/lib64/ld-linux-x86-64.so.2"} }

func (wireHost) Env(string) (string, bool) { return "", false }
