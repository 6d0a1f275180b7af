// Package fieldtest checks conversions between struct types field by
// field, by name, so that a field added to the source and not carried to
// the target fails a test.
package fieldtest

import (
	"reflect"
	"slices"
	"testing"
)

// Fill sets every integer field of the struct v points to a distinct
// value (1, 2, ...) and every string field to its name.
func Fill(v any) {
	s := reflect.ValueOf(v).Elem()
	for i := range s.NumField() {
		f := s.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.String:
			f.SetString(s.Type().Field(i).Name)
		case reflect.Bool:
			f.SetBool(true)
		}
	}
}

// Same checks that every field of got has the value of the field of
// src with the same name (converted), for fields src has.
func Same(t testing.TB, src, got any, skip ...string) {
	t.Helper()
	sv, gv := reflect.ValueOf(src), reflect.ValueOf(got)
	n := 0
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		sf := sv.FieldByName(name)
		if !sf.IsValid() || sf.Kind() == reflect.Map {
			continue
		}
		n++
		if a, b := sf.Interface(), gv.Field(i).Convert(sf.Type()).Interface(); a != b {
			t.Errorf("%s: %v, want %v", name, b, a)
		}
	}
	for i := range sv.NumField() {
		name := sv.Type().Field(i).Name
		if _, ok := gv.Type().FieldByName(name); !ok && !slices.Contains(skip, name) {
			t.Errorf("%s of %s is not carried to %s", name, sv.Type(), gv.Type())
		}
	}
	if n == 0 {
		t.Fatal("no field compared")
	}
}
