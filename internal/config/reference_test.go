package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// keys lists every dotted configuration key of t (struct fields with yaml tags).
func keys(t reflect.Type, prefix string) []string {
	var out []string
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.String() != "time.Time" {
			out = append(out, keys(ft, key+".")...)
			continue
		}
		out = append(out, key)
	}
	return out
}

// TestREADMEDocumentsEveryKey fails when a configuration key is missing from README.md's
// configuration reference (each key appears there in backquotes).
func TestREADMEDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	all := keys(reflect.TypeOf(Config{}), "")
	if len(all) < 30 {
		t.Fatalf("found only %d keys: %v", len(all), all)
	}
	for _, k := range all {
		if !strings.Contains(readme, "`"+k+"`") {
			t.Errorf("README.md does not document the configuration key `%s`", k)
		}
	}
}
