// Package wiretest checks that a type's hand-written wire encoding
// (internal/wire) carries every field: Layout renders a type's shape the
// way the encodings pin it, and Fill sets every field to a distinct
// non-zero value for a round trip.
package wiretest

import (
	"reflect"
	"strconv"
	"strings"
)

// Layout renders t as "Name{Field type; ...}", lists as "[]elem" and every
// other type by its kind ("string", "uint32"), recursively.
func Layout(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct:
		var fields []string
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			fields = append(fields, f.Name+" "+Layout(f.Type))
		}
		return t.Name() + "{" + strings.Join(fields, "; ") + "}"
	case reflect.Slice:
		return "[]" + Layout(t.Elem())
	}
	return t.Kind().String()
}

// Fill sets every exported field reachable from ptr (a pointer to a
// struct) to a value that differs from its zero value and from the other
// fields', with two elements in every list. It panics on a kind it does
// not know, so that a new kind of field gets a value.
func Fill(ptr any) {
	n := 0
	fill(reflect.ValueOf(ptr).Elem(), &n)
}

func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), n)
		fill(s.Index(1), n)
		v.Set(s)
	case reflect.String:
		v.SetString("s" + strconv.Itoa(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(-int64(*n) * 1000003)
	case reflect.Uint8:
		v.SetUint(uint64(*n % 256))
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n) * 65537)
	default:
		panic("wiretest: Fill: give kind " + v.Kind().String() + " a value")
	}
}
