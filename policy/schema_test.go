package policy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// schemaDoc is the part of schema/policy.schema.json the tests look at.
type schemaDoc struct {
	Schema               string                     `json:"$schema"`
	AdditionalProperties *bool                      `json:"additionalProperties"`
	Required             []string                   `json:"required"`
	Properties           map[string]json.RawMessage `json:"properties"`
	Defs                 map[string]json.RawMessage `json:"$defs"`
}

type schemaObject struct {
	AdditionalProperties *bool                      `json:"additionalProperties"`
	Properties           map[string]json.RawMessage `json:"properties"`
	Items                struct {
		Enum  []string          `json:"enum"`
		AllOf []json.RawMessage `json:"allOf"`
	} `json:"items"`
	Pattern string `json:"pattern"`
	OneOf   []struct {
		Pattern string `json:"pattern"`
	} `json:"oneOf"`
}

func loadSchema(t *testing.T) schemaDoc {
	t.Helper()
	data, err := os.ReadFile("../schema/policy.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s schemaDoc
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("schema is not valid JSON: %v", err)
	}
	return s
}

func sub(t *testing.T, raw json.RawMessage) schemaObject {
	t.Helper()
	var o schemaObject
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestSchemaMatchesParser keeps the schema's keys and enums equal to what
// the parser accepts, so they cannot drift apart.
func TestSchemaMatchesParser(t *testing.T) {
	s := loadSchema(t)
	if s.Schema != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %q, want draft 2020-12", s.Schema)
	}
	if s.AdditionalProperties == nil || *s.AdditionalProperties {
		t.Errorf("top-level additionalProperties is not false")
	}
	if !slices.Equal(s.Required, []string{"version"}) {
		t.Errorf("required = %q, want [version]", s.Required)
	}
	if got, want := sortedKeys(s.Properties), sortedCopy(policy.TopKeys); !slices.Equal(got, want) {
		t.Errorf("schema properties = %q, parser keys = %q", got, want)
	}
	b := sub(t, s.Properties["budget"])
	if b.AdditionalProperties == nil || *b.AdditionalProperties {
		t.Errorf("budget additionalProperties is not false")
	}
	if got, want := sortedKeys(b.Properties), sortedCopy(policy.BudgetKeys()); !slices.Equal(got, want) {
		t.Errorf("schema budget properties = %q, parser budget keys = %q", got, want)
	}
	var names []string
	for _, d := range policy.DowngradeNames {
		names = append(names, string(d))
	}
	if got := sub(t, s.Properties["allow_downgrade"]).Items.Enum; !slices.Equal(sortedCopy(got), sortedCopy(names)) {
		t.Errorf("schema allow_downgrade enum = %q, parser = %q", got, names)
	}
}

// TestSchemaPatterns checks the schema's value patterns against the
// parser on sample inputs: both must accept and refuse the same ones.
func TestSchemaPatterns(t *testing.T) {
	s := loadSchema(t)
	duration := regexp.MustCompile(sub(t, s.Defs["duration"]).Pattern)
	sizeOneOf := sub(t, s.Defs["size"]).OneOf
	if len(sizeOneOf) != 2 {
		t.Fatalf("size oneOf has %d entries, want 2", len(sizeOneOf))
	}
	size := regexp.MustCompile(sizeOneOf[1].Pattern)
	var envPattern string
	for _, a := range sub(t, s.Properties["env"]).Items.AllOf {
		if p := sub(t, a).Pattern; p != "" {
			envPattern = p
		}
	}
	env := regexp.MustCompile(envPattern)

	durations := []string{"30s", "2m", "1h30m", "500ms", "1.5s", "7ns", "3us", "30", "", "-1s", "+1s", ".5s", "5.s", "5µs", "1d", "5 s", "5S"}
	for _, in := range durations {
		_, err := policy.ParseDuration(in)
		if got := duration.MatchString(in); got != (err == nil) {
			t.Errorf("schema duration pattern matches %q = %v, ParseDuration error = %v", in, got, err)
		}
	}
	sizes := []string{"1", "1048576", "1B", "1KB", "1MB", "1GB", "1TB", "1KiB", "1MiB", "1GiB", "1TiB", "", "MiB", "1mib", "1M", "1 MiB", "-1", "1.5GiB", "0x10"}
	for _, in := range sizes {
		_, err := policy.ParseSize(in)
		if got := size.MatchString(in); got != (err == nil) {
			t.Errorf("schema size pattern matches %q = %v, ParseSize error = %v", in, got, err)
		}
	}
	envs := []string{"LANG", "A=1", "_X=", "a_b=c=d", "1X", "A-B", "=x", "A B"}
	for _, in := range envs {
		_, err := policy.New(policy.Spec{Env: []string{in}})
		if got := env.MatchString(in); got != (err == nil) {
			t.Errorf("schema env pattern matches %q = %v, New error = %v", in, got, err)
		}
	}
}
