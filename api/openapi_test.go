package api_test

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-sandbox/airlock/api"
)

// TestOpenAPIMatchesTypes keeps the schemas of openapi.yaml equal to the
// Go types the server sends and the client decodes: at every level, an
// object's properties are the json tags of its type, and what it requires
// is a field the encoder never omits.
func TestOpenAPIMatchesTypes(t *testing.T) {
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(api.OpenAPI()), &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v, want 3.1.0", doc["openapi"])
	}
	exec := []string{"paths", "/v1/sessions/{id}/exec", "post"}
	tests := []struct {
		at     []string // the schema's keys from the document's root
		typ    reflect.Type
		subset bool // the schema names only some of the type's fields
	}{
		{[]string{"components", "schemas", "Report"}, reflect.TypeFor[api.Report](), false},
		{[]string{"components", "schemas", "Session"}, reflect.TypeFor[api.SessionInfo](), false},
		{[]string{"components", "schemas", "Denial"}, reflect.TypeFor[api.Denial](), false},
		{[]string{"components", "schemas", "Operator"}, reflect.TypeFor[api.Operator](), false},
		{[]string{"components", "schemas", "DenialCounts"}, reflect.TypeFor[api.DenialCounts](), false},
		{[]string{"components", "schemas", "Excess"}, reflect.TypeFor[api.Excess](), false},
		{[]string{"components", "schemas", "Usage"}, reflect.TypeFor[api.Usage](), false},
		{[]string{"components", "schemas", "Entry"}, reflect.TypeFor[api.Entry](), false},
		{[]string{"components", "schemas", "WriteEntry"}, reflect.TypeFor[api.WriteEntry](), false},
		{[]string{"components", "schemas", "Error"}, reflect.TypeFor[api.ErrorBody](), false},
		{[]string{"components", "schemas", "OutputEvent"}, reflect.TypeFor[api.Event](), true},
		{append(exec, "requestBody", "content", "application/json", "schema"), reflect.TypeFor[api.ExecBody](), false},
		{append(exec, "responses", "200", "content", "application/json", "schema"), reflect.TypeFor[api.ExecResult](), false},
	}
	for _, tt := range tests {
		name := strings.Join(tt.at, ".")
		n, ok := lookup(doc, tt.at...).(map[string]any)
		if !ok {
			t.Errorf("openapi.yaml has no schema at %s", name)
			continue
		}
		checkSchema(t, doc, name, tt.typ, n, tt.subset)
	}
}

// lookup follows keys from v.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// resolve follows "$ref" and a one-element "allOf" to the schema meant.
func resolve(doc map[string]any, n map[string]any) map[string]any {
	for n != nil {
		if ref, ok := n["$ref"].(string); ok {
			n, _ = lookup(doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...).(map[string]any)
			continue
		}
		if all, ok := n["allOf"].([]any); ok && len(all) == 1 {
			n, _ = all[0].(map[string]any)
			continue
		}
		break
	}
	return n
}

// checkSchema compares the object schema n with the struct type typ and
// descends into the fields that are structs, pointers to structs or lists
// of them.
func checkSchema(t *testing.T, doc map[string]any, name string, typ reflect.Type, n map[string]any, subset bool) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
		if items, ok := resolve(doc, n)["items"].(map[string]any); ok {
			n = items
			name += "[]"
		}
	}
	n = resolve(doc, n)
	if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[time.Time]() {
		return
	}
	if n == nil {
		t.Errorf("%s: no schema for %s", name, typ)
		return
	}
	props, _ := n["properties"].(map[string]any)
	fields := map[string]reflect.StructField{}
	omit := map[string]bool{}
	var tags []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		fields[tag], omit[tag] = f, strings.Contains(opts, "omitempty")
		tags = append(tags, tag)
	}
	var names []string
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	sort.Strings(tags)
	switch {
	case subset:
		for _, k := range names {
			if _, ok := fields[k]; !ok {
				t.Errorf("%s: property %q is not a json field of %s %v", name, k, typ, tags)
			}
		}
	case !slices.Equal(names, tags):
		t.Errorf("%s: properties %v, want the json fields of %s: %v", name, names, typ, tags)
	}
	req, _ := n["required"].([]any)
	for _, r := range req {
		if k, _ := r.(string); omit[k] {
			t.Errorf("%s: requires %q, which %s omits when empty", name, k, typ)
		} else if _, ok := fields[k]; !ok {
			t.Errorf("%s: requires %q, which is not a json field of %s", name, k, typ)
		}
	}
	for k, p := range props {
		if f, ok := fields[k]; ok {
			if pm, ok := p.(map[string]any); ok {
				checkSchema(t, doc, name+"."+k, f.Type, pm, false)
			}
		}
	}
}
