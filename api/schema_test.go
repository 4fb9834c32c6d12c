package api_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// schemaNode is the part of JSON Schema 2020-12 that the type check reads.
type schemaNode struct {
	Schema               string                 `json:"$schema"`
	Ref                  string                 `json:"$ref"`
	Properties           map[string]*schemaNode `json:"properties"`
	Required             []string               `json:"required"`
	AdditionalProperties *bool                  `json:"additionalProperties"`
	Items                *schemaNode            `json:"items"`
	Enum                 []any                  `json:"enum"`
	MaxItems             *int                   `json:"maxItems"`
	Defs                 map[string]*schemaNode `json:"$defs"`
}

// resolve follows a local $ref ("#/$defs/name").
func (root *schemaNode) resolve(n *schemaNode) *schemaNode {
	for n != nil && n.Ref != "" {
		n = root.Defs[strings.TrimPrefix(n.Ref, "#/$defs/")]
	}
	return n
}

// alwaysPresent lists the fields with omitempty that a report nevertheless
// always carries, so the schema requires them, and why.
var alwaysPresent = map[string]string{
	"report.denials[].count": "omitempty drops only 0, which is the count of a single refusal (api.Error.Denial); in a report it is at least 1",
}

// jsonFields returns the json names of t's fields, and which of them the
// schema must require: those without omitempty, and alwaysPresent.
func jsonFields(path string, t reflect.Type) (names, required []string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		names = append(names, name)
		if !strings.Contains(opts, "omitempty") || alwaysPresent[path+"."+name] != "" {
			required = append(required, name)
		}
	}
	sort.Strings(names)
	sort.Strings(required)
	return names, required
}

// TestReportSchemaMatchesType keeps schema/report.schema.json equal to
// api.Report: at every level, the schema's properties are the json tags of
// the Go struct, its required lists the fields without omitempty, and it
// admits no other property. Its enums mirror the Go constants.
func TestReportSchemaMatchesType(t *testing.T) {
	data, err := os.ReadFile("../schema/report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	root := new(schemaNode)
	if err := json.Unmarshal(data, root); err != nil {
		t.Fatalf("schema/report.schema.json is not valid JSON: %v", err)
	}
	if root.Schema != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %q, want draft 2020-12", root.Schema)
	}
	seen := map[string]bool{}
	var walk func(path string, typ reflect.Type, n *schemaNode)
	walk = func(path string, typ reflect.Type, n *schemaNode) {
		n = root.resolve(n)
		if n == nil {
			t.Errorf("%s: no schema for %s", path, typ)
			return
		}
		switch typ.Kind() {
		case reflect.Pointer:
			walk(path, typ.Elem(), n)
			return
		case reflect.Slice:
			if typ.Elem().Kind() == reflect.Struct {
				walk(path+"[]", typ.Elem(), n.Items)
			}
			return
		case reflect.Struct:
		default:
			return
		}
		names, required := jsonFields(path, typ)
		var props []string
		for k := range n.Properties {
			props = append(props, k)
			seen[path+"."+k] = true
		}
		sort.Strings(props)
		if !slices.Equal(props, names) {
			t.Errorf("%s: schema properties %v, want the json tags of %s: %v", path, props, typ, names)
		}
		req := slices.Clone(n.Required)
		sort.Strings(req)
		if !slices.Equal(req, required) {
			t.Errorf("%s: schema required %v, want the fields of %s without omitempty: %v", path, req, typ, required)
		}
		if n.AdditionalProperties == nil || *n.AdditionalProperties {
			t.Errorf("%s: additionalProperties is not false", path)
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if p, ok := n.Properties[name]; ok {
				walk(path+"."+name, f.Type, p)
			}
		}
	}
	walk("report", reflect.TypeFor[api.Report](), root)
	for p, why := range alwaysPresent {
		if !seen[p] {
			t.Errorf("alwaysPresent names %s (%s), which the report does not have", p, why)
		}
	}

	layers := []any{audit.LayerFS, audit.LayerNet, audit.LayerExec, audit.LayerBudget, audit.LayerKernel, audit.LayerTool}
	if got := root.Defs["denial"].Properties["layer"].Enum; !slices.Equal(got, layers) {
		t.Errorf("denial.layer enum = %v, want %v", got, layers)
	}
	if mi := root.Properties["denials"].MaxItems; mi == nil || *mi != audit.DefaultMaxDistinct+audit.MaxExtraKinds {
		t.Errorf("denials maxItems = %v, want audit.DefaultMaxDistinct+MaxExtraKinds (%d)", mi, audit.DefaultMaxDistinct+audit.MaxExtraKinds)
	}
	actions := []any{string(policy.ActionAdd), string(policy.ActionRemove), string(policy.ActionRaise)}
	if got := root.Defs["change"].Properties["action"].Enum; !slices.Equal(got, actions) {
		t.Errorf("change.action enum = %v, want %v", got, actions)
	}
	limits := []any{string(budget.MaxWall), string(budget.MaxOutputBytes), string(budget.MaxOps), string(budget.MaxMemory), string(budget.MaxCPU), string(budget.MaxPids), string(budget.MaxScratch), string(budget.MaxWrite), string(budget.Interrupted), string(budget.SessionLifetime), string(budget.SessionClosed)}
	if got := root.Defs["limit"].Enum; !slices.Equal(got, limits) {
		t.Errorf("limit enum = %v, want %v", got, limits)
	}
}

// TestChangeIsPolicyChange: api.Change is the JSON form of policy.Change,
// field for field, so a report's changes decode into policy.Change and
// apply.
func TestChangeIsPolicyChange(t *testing.T) {
	in := policy.Change{Action: policy.ActionRaise, Key: "max_wall", Value: "1m"}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var c api.Change
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	back, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(back) != string(data) {
		t.Errorf("api.Change JSON = %s, want policy.Change's %s", back, data)
	}
	pt, at := reflect.TypeFor[policy.Change](), reflect.TypeFor[api.Change]()
	if pt.NumField() != at.NumField() {
		t.Fatalf("policy.Change has %d fields, api.Change %d", pt.NumField(), at.NumField())
	}
	for i := range pt.NumField() {
		if p, a := pt.Field(i), at.Field(i); p.Name != a.Name || p.Tag != a.Tag || p.Type.Kind() != a.Type.Kind() {
			t.Errorf("field %d: policy.Change has %s %s `%s`, api.Change %s %s `%s`", i, p.Name, p.Type, p.Tag, a.Name, a.Type, a.Tag)
		}
	}
}

// TestDenialCountsByLayerNeverNull: by_layer is an object even when no
// denial happened, as the schema requires.
func TestDenialCountsByLayerNeverNull(t *testing.T) {
	data, err := json.Marshal(api.Report{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"denial_counts":{"total":0,"by_layer":{},"dropped":0}`) {
		t.Errorf("zero report = %s, want by_layer {}", data)
	}
}
