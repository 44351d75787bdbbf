package envelope

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var compactCases = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `1E-7`, `-12.5e10`,
	`true`, `tru`, `nulls`, `null`, ` {"a" : [1, 2 , {"b":null}] } `, `{"a":1,}`, `[1,]`, `{"a"}`,
	`{,}`, `"\u00e9\n\"\\\/\b\f\r\t"`, `"\u00g0"`, `"\x"`, "\"\x01\"", "\"\xff\xfe\"", `"abc`,
	`[1 2]`, `{"a":1 "b":2}`, "\t[\n]\r", `1 2`, `[[[[]]]]`, `{"":""}`,
}

func TestCompactAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range compactCases {
		checkCompact(t, in)
	}
}

func TestCompactDepthLimit(t *testing.T) {
	for _, depth := range []int{maxDepth, maxDepth + 1} {
		in := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		if got, want := validJSON([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("depth %d: valid %v, encoding/json %v", depth, got, want)
		}
	}
}

func FuzzCompact(f *testing.F) {
	for _, in := range compactCases {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) { checkCompact(t, in) })
}

func checkCompact(t *testing.T, in string) {
	t.Helper()
	if r := ResultFromText(in); !json.Valid(r) {
		t.Fatalf("ResultFromText(%q) = %q, not JSON", in, r)
	}
	valid := json.Valid([]byte(in))
	if got := validJSON([]byte(in)); got != valid {
		t.Fatalf("validJSON(%q) = %v, json.Valid %v", in, got, valid)
	}
	got, ok := appendCompact([]byte("x"), []byte(in))
	if ok != valid {
		t.Fatalf("appendCompact(%q) ok = %v, json.Valid %v", in, ok, valid)
	}
	if !ok {
		if string(got) != "x" {
			t.Fatalf("appendCompact(%q) failed but wrote %q", in, got)
		}
		return
	}
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(in)); err != nil {
		t.Fatal(err)
	}
	if string(got[1:]) != want.String() {
		t.Fatalf("appendCompact(%q) = %q, json.Compact %q", in, got[1:], want.String())
	}
}

func TestResultFromText(t *testing.T) {
	for in, want := range map[string]string{
		`{"id": 7, "ok": true}`:          `{"id":7,"ok":true}`,
		" [1, 2]\n":                      `[1,2]`,
		`"quoted"`:                       `"quoted"`,
		`sent to <ana@example.com> & co`: `"sent to <ana@example.com> & co"`,
		"line one\nline two":             `"line one\nline two"`,
		"":                               `""`,
		`{"unfinished":`:                 `"{\"unfinished\":"`,
		"bad \xff utf-8":                 `"bad \ufffd utf-8"`,
	} {
		if got := string(ResultFromText(in)); got != want {
			t.Errorf("ResultFromText(%q) = %s, want %s", in, got, want)
		}
	}
}

func FuzzPlainWord(f *testing.F) {
	for _, s := range []string{"abcdefgh", "abc\"efgh", "abcdefg\\", "\x1fbcdefgh", "abcdefg\x80", "\x7f\x20~!#$%&", "a\u2028bcde"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) < 8 {
			return
		}
		want := true
		for i := range 8 {
			if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
				want = false
			}
		}
		if got := plainWord(load64(s, 0)); got != want {
			t.Fatalf("plainWord(%q) = %v, want %v", s[:8], got, want)
		}
	})
}
