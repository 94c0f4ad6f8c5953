package checkpoint

import (
	"encoding/json"
	"strings"
	"testing"
)

// A manifest that is not the JSON expected is reported with where (byte,
// line, column; the field) and what kind of value was wanted, never with
// Go's type names (it said "cannot unmarshal array into Go value of type
// checkpoint.Manifest").
func TestJSONWhy(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"not json", []string{"invalid character 'o' in literal null", "at byte 2 (line 1, column 2)"}},
		{"{\n  \"step\": 3,\n  x\n}", []string{"invalid character 'x'", "(line 3, column 3)"}},
		{`{"format_version": 3, "step"`, []string{"unexpected end of JSON input after 28 bytes (the file is cut short)"}},
		{``, []string{"unexpected end of JSON input after 0 bytes"}},
		{`[]`, []string{"the whole file is a JSON array, want an object"}},
		{`{"parent": "ckpt-500"}`, []string{"parent is a JSON string, want an integer"}},
		{`{"shards": {}}`, []string{"shards is a JSON object, want an array"}},
		{`{"shards": [{"size": "big"}]}`, []string{"shards.size is a JSON string, want an integer"}},
	} {
		var m Manifest
		err := json.Unmarshal([]byte(c.in), &m)
		if err == nil {
			t.Fatalf("%q: no error", c.in)
		}
		got := jsonWhy([]byte(c.in), err)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%q: %q lacks %q", c.in, got, w)
			}
		}
		if strings.Contains(got, "Go ") || strings.Contains(got, "checkpoint.") {
			t.Errorf("%q: %q names Go types", c.in, got)
		}
	}
}
