package v1alpha1_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/controller/api/v1alpha1"
)

// readCRD decodes the embedded CRD file strictly.
func readCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := v1alpha1.CRDs.ReadFile("crd/" + file)
	if err != nil {
		t.Fatal(err)
	}
	crd := new(apiextensionsv1.CustomResourceDefinition)
	if err := yaml.UnmarshalStrict(b, crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return crd
}

var timeType = reflect.TypeFor[metav1.Time]()

// compare walks the Go type typ and the schema s together and reports
// every field, type or required mark on which they differ.
func compare(t reporter, at string, typ reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := ""
	switch {
	case typ == timeType:
		if s.Type != "string" || s.Format != "date-time" {
			t.Errorf("%s: Go metav1.Time, schema %s/%s; want string/date-time", at, s.Type, s.Format)
		}
		return
	case typ.Kind() == reflect.String:
		want = "string"
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Int64:
		want = "integer"
	case typ.Kind() == reflect.Slice:
		want = "array"
	case typ.Kind() == reflect.Struct:
		want = "object"
	default:
		t.Errorf("%s: Go kind %s has no schema mapping in this test", at, typ.Kind())
		return
	}
	if s.Type != want {
		t.Errorf("%s: Go %s, schema type %q; want %q", at, typ, s.Type, want)
		return
	}
	switch want {
	case "array":
		if s.Items == nil || s.Items.Schema == nil {
			t.Errorf("%s: array without items", at)
			return
		}
		compare(t, at+"[]", typ.Elem(), s.Items.Schema)
	case "object":
		fields := map[string]bool{}
		var required []string
		walkFields(typ, func(name string, ft reflect.Type, omitempty bool) {
			fields[name] = true
			if !omitempty {
				required = append(required, name)
			}
			if name == "metadata" && at == "" {
				return // the API server's own schema
			}
			p, ok := s.Properties[name]
			if !ok {
				t.Errorf("%s.%s: in the Go type, not in the schema", at, name)
				return
			}
			compare(t, at+"."+name, ft, &p)
		})
		for name := range s.Properties {
			if !fields[name] {
				t.Errorf("%s.%s: in the schema, not in the Go type", at, name)
			}
		}
		slices.Sort(required)
		got := slices.Sorted(slices.Values(s.Required))
		if !slices.Equal(got, required) {
			t.Errorf("%s: schema requires %q; the Go fields without omitempty are %q", at, got, required)
		}
	}
}

// walkFields calls fn for each JSON field of the struct type typ,
// descending into inline fields.
func walkFields(typ reflect.Type, fn func(name string, ft reflect.Type, omitempty bool)) {
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") {
			walkFields(f.Type, fn)
			continue
		}
		if name == "" {
			name = f.Name
		}
		fn(name, f.Type, strings.Contains(opts, "omitempty"))
	}
}

// TestCRDMatchesTypes checks that each committed CRD describes its Go
// type field for field: names, types and required fields (those without
// omitempty), both ways. The API server prunes fields its schema lacks,
// so a Go field missing here would be silently dropped from status.
func TestCRDMatchesTypes(t *testing.T) {
	for _, tt := range []struct {
		file, kind string
		obj        runtime.Object
	}{
		{"airlock.dev_sandboxes.yaml", "Sandbox", &v1alpha1.Sandbox{}},
		{"airlock.dev_sandboxtemplates.yaml", "SandboxTemplate", &v1alpha1.SandboxTemplate{}},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			crd := readCRD(t, tt.file)
			if crd.Spec.Group != v1alpha1.Group || crd.Spec.Names.Kind != tt.kind || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != v1alpha1.Version {
				t.Fatalf("%s: group %s kind %s versions %d; want %s %s one version %s", tt.file, crd.Spec.Group, crd.Spec.Names.Kind, len(crd.Spec.Versions), v1alpha1.Group, tt.kind, v1alpha1.Version)
			}
			if crd.Name != crd.Spec.Names.Plural+"."+crd.Spec.Group {
				t.Errorf("CRD name %s, want %s.%s", crd.Name, crd.Spec.Names.Plural, crd.Spec.Group)
			}
			compare(t, "", reflect.TypeOf(tt.obj).Elem(), crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
		})
	}
}

// TestCRDMatchesTypesCatches shows that the comparison fails on drift: a
// field missing from the schema, an extra one, a wrong type, a wrong
// required list.
func TestCRDMatchesTypesCatches(t *testing.T) {
	type inner struct {
		N int64 `json:"n"`
	}
	type obj struct {
		A string  `json:"a"`
		B []inner `json:"b,omitempty"`
	}
	good := apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"a"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"a": {Type: "string"},
		"b": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"n"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{"n": {Type: "integer"}}}}},
	}}
	if failed := runCompare(reflect.TypeFor[obj](), good); failed {
		t.Fatal("compare rejects a matching schema")
	}
	drift := map[string]func(s *apiextensionsv1.JSONSchemaProps){
		"missing": func(s *apiextensionsv1.JSONSchemaProps) { delete(s.Properties, "a") },
		"extra": func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["c"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		},
		"type": func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["a"] = apiextensionsv1.JSONSchemaProps{Type: "integer"}
		},
		"required": func(s *apiextensionsv1.JSONSchemaProps) { s.Required = nil },
		"nested": func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["b"].Items.Schema.Properties["n"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		},
	}
	for name, edit := range drift {
		s := *good.DeepCopy()
		edit(&s)
		if !runCompare(reflect.TypeFor[obj](), s) {
			t.Errorf("compare accepts drift %q", name)
		}
	}
}

// reporter is the part of testing.T that compare uses.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder counts what compare reports.
type recorder struct{ n int }

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.n++ }

// runCompare reports whether compare found a difference.
func runCompare(typ reflect.Type, s apiextensionsv1.JSONSchemaProps) bool {
	var r recorder
	compare(&r, "x", typ, &s)
	return r.n > 0
}

// fill sets every field reachable from v to a non-zero value.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem() == reflect.TypeFor[metav1.Time]() {
			v.Set(reflect.ValueOf(&metav1.Time{Time: time.Unix(1700000000, 0)}))
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[metav1.Time]() {
			v.Set(reflect.ValueOf(metav1.Time{Time: time.Unix(1700000000, 0)}))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	}
}

// shared returns the path of the first pointer, slice or map that a and b
// share, or "".
func shared(a, b reflect.Value, at string) string {
	if a.Type() == reflect.TypeFor[time.Time]() {
		return "" // its *Location is shared by design
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return at
		}
		return shared(a.Elem(), b.Elem(), at)
	case reflect.Slice:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return at
		}
		for i := range a.Len() {
			if p := shared(a.Index(i), b.Index(i), at+"[]"); p != "" {
				return p
			}
		}
	case reflect.Map:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return at
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if p := shared(a.Field(i), b.Field(i), at+"."+a.Type().Field(i).Name); p != "" {
				return p
			}
		}
	}
	return ""
}

// TestDeepCopy fills every field of each kind, copies it, and checks the
// copy is equal and shares no pointer, slice or map with the original.
func TestDeepCopy(t *testing.T) {
	for _, obj := range []runtime.Object{&v1alpha1.Sandbox{}, &v1alpha1.SandboxList{}, &v1alpha1.SandboxTemplate{}, &v1alpha1.SandboxTemplateList{}} {
		t.Run(reflect.TypeOf(obj).Elem().Name(), func(t *testing.T) {
			fill(reflect.ValueOf(obj).Elem(), 0)
			cp := obj.DeepCopyObject()
			if !reflect.DeepEqual(obj, cp) {
				t.Fatalf("DeepCopyObject differs from its original:\n%+v\n%+v", obj, cp)
			}
			if p := shared(reflect.ValueOf(obj), reflect.ValueOf(cp), ""); p != "" {
				t.Errorf("DeepCopyObject shares %s with its original", p)
			}
		})
	}
}
