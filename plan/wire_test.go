package plan

import (
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

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
