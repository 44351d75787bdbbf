package canonjson_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe/internal/canonjson"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{" { \"a\" : [ 1 , 2 ] }\n", `{"a":[1,2]}`},
		{`{"z":{"y":1,"x":2}}`, `{"z":{"x":2,"y":1}}`},
		{`"\u0041\/\u00e9"`, `"A/é"`},
		{`"tab\there\u0001"`, `"tab\there\u0001"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"<&>"`, `"<&>"`},
		{`1.0`, `1`},
		{`10e-1`, `1`},
		{`0.1e1`, `1`},
		{`-0`, `0`},
		{`-0.0e5`, `0`},
		{`1.50`, `1.5`},
		{`100`, `100`},
		{`1e2`, `100`},
		{`1E+2`, `100`},
		{`0.000001`, `0.000001`},
		{`0.0000001`, `1e-7`},
		{`123456789012345678901`, `123456789012345678901`},
		{`1234567890123456789012`, `1.234567890123456789012e21`},
		{`9007199254740993`, `9007199254740993`},
		{`-12.3400e-2`, `-0.1234`},
		{`true`, `true`},
		{`[null,false]`, `[null,false]`},
		{`{}`, `{}`},
		{`[]`, `[]`},
	}
	for _, tt := range tests {
		got, err := canonjson.Canonical([]byte(tt.in))
		if err != nil {
			t.Errorf("Canonical(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Canonical(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestCanonicalRejects(t *testing.T) {
	tests := []struct {
		in, msg string
	}{
		{`{"a":1,"a":2}`, `duplicate member name "a"`},
		{"\"\xff\"", "not valid UTF-8"},
		{`"\ud800"`, "lone surrogate"},
		{`"\udc00x"`, "lone surrogate"},
		{`1e9999999999`, "exponent out of range"},
		{`1e10001`, "number out of range"},
		{`-1.5e-10002`, "number out of range"},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), "nesting deeper"},
		{`{"a":1} x`, "after the JSON value"},
		{`{"a":1,}`, "member name"},
		{`01`, "after the JSON value"},
		{`1.`, "digits after '.'"},
		{`"a`, "end of input"},
		{``, "end of input"},
		{`nul`, "literal"},
		{"\"a\nb\"", "control character"},
		{`"\x"`, "invalid escape"},
	}
	for _, tt := range tests {
		_, err := canonjson.Canonical([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Canonical(%q) error = %v, want one mentioning %q", tt.in, err, tt.msg)
		}
	}
}

func TestParseObject(t *testing.T) {
	obj, err := canonjson.ParseObject([]byte(`{"to":"ana@example.com","subject":"Hi","body":{"b":1,"a":1.0}}`))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range obj.Members() {
		names = append(names, m.Name)
	}
	if want := []string{"body", "subject", "to"}; !reflect.DeepEqual(names, want) {
		t.Errorf("member order = %v, want %v", names, want)
	}
	if v, ok := obj.Get("body"); !ok || string(v) != `{"a":1,"b":1}` {
		t.Errorf("Get(body) = %s, %v", v, ok)
	}
	if _, ok := obj.Get("cc"); ok {
		t.Error("Get(cc) found a member that is not there")
	}
	got := obj.AppendCanonical(nil, func(n []byte) bool { return string(n) != "body" })
	if string(got) != `{"subject":"Hi","to":"ana@example.com"}` {
		t.Errorf("AppendCanonical without body = %s", got)
	}
	if _, err := canonjson.ParseObject([]byte(`["not","an","object"]`)); err == nil {
		t.Error("ParseObject accepted an array")
	}
}

// FuzzCanonical checks that canonical output is valid JSON, a fixed point, and
// means the same as the input; and that every valid input is accepted unless it
// breaks one of the documented strict rules.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":[1,2.50,"x"],"a":{"c":null}}`, `"\u00e9\n"`, `-0.0e-0`, `1e21`, `1e-7`,
		`{"a":1,"a":1}`, `[[[]]]`, `"\ud83d\ude00"`, `123.456e789`, `{"":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := canonjson.Canonical(in)
		if err != nil {
			if json.Valid(in) && utf8.Valid(in) {
				msg := err.Error()
				strict := []string{"duplicate member", "nesting deeper", "exponent out of range", "surrogate"}
				ok := false
				for _, s := range strict {
					ok = ok || strings.Contains(msg, s)
				}
				if !ok {
					t.Fatalf("valid JSON %q refused: %v", in, err)
				}
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("canonical form %q of %q is not valid JSON", out, in)
		}
		again, err := canonjson.Canonical(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not a fixed point: %q -> %q (%v)", out, again, err)
		}
		var a, b any
		if err := json.Unmarshal(in, &a); err != nil {
			var rangeErr *json.UnmarshalTypeError
			if errors.As(err, &rangeErr) && strings.HasPrefix(rangeErr.Value, "number") {
				return // a number beyond float64: no float64 meaning to compare
			}
			t.Fatalf("accepted %q that encoding/json refuses: %v", in, err)
		}
		if err := json.Unmarshal(out, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("meaning changed: %q -> %q", in, out)
		}
	})
}

func TestAppendObjectKeepsThePrefix(t *testing.T) {
	obj, err := canonjson.AppendObject([]byte("tag:"), []byte(`{"b":"x\u0041","a\u00e9":[1.0,{"d":1,"c":2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(obj.Buffer()); got != `tag:{"aé":[1,{"c":2,"d":1}],"b":"xA"}` {
		t.Errorf("Buffer = %s", got)
	}
	if got := string(obj.Canonical()); got != `{"aé":[1,{"c":2,"d":1}],"b":"xA"}` {
		t.Errorf("Canonical = %s", got)
	}
	if obj.Len() != 2 || string(obj.Name(0)) != "aé" || string(obj.Value(0)) != `[1,{"c":2,"d":1}]` || string(obj.Name(1)) != "b" {
		t.Errorf("members %v", obj.Members())
	}
}

// FuzzObject checks that AppendObject agrees with Canonical and that member
// access matches the canonical form.
func FuzzObject(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":{"y":[],"x":"\n"}}`, `{"\u00e9":1,"e":2}`, `{}`, `{"a":"\"q\""}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		obj, err := canonjson.AppendObject([]byte("p"), in)
		want, werr := canonjson.Canonical(in)
		if err != nil {
			return
		}
		if werr != nil || string(obj.Canonical()) != string(want) {
			t.Fatalf("AppendObject %q != Canonical %q (%v)", obj.Canonical(), want, werr)
		}
		if got := obj.AppendCanonical(nil, nil); string(got) != string(want) {
			t.Fatalf("AppendCanonical(nil) = %q, want %q", got, want)
		}
		for i := range obj.Len() {
			v, ok := obj.Get(string(obj.Name(i)))
			if !ok || string(v) != string(obj.Value(i)) {
				t.Fatalf("Get(%q) = %q, %v; want %q", obj.Name(i), v, ok, obj.Value(i))
			}
		}
		// An Object reused after another parse reads the same.
		reused := reusedObject(t)
		if err := reused.Append([]byte("p"), in); err != nil {
			t.Fatalf("Append into a reused Object: %v", err)
		}
		if !reflect.DeepEqual(reused.Members(), obj.Members()) || string(reused.Buffer()) != string(obj.Buffer()) {
			t.Fatalf("reused Object: %v %q; fresh: %v %q", reused.Members(), reused.Buffer(), obj.Members(), obj.Buffer())
		}
	})
}

// reusedObject returns an Object that has held a larger object with escaped
// names.
func reusedObject(t *testing.T) *canonjson.Object {
	var o canonjson.Object
	if err := o.Append(nil, []byte(`{"z\u00e9":1,"y\n":2,"x":3,"w":4,"v":5,"u":{"t":6}}`)); err != nil {
		t.Fatal(err)
	}
	if err := o.Append(nil, []byte(`[1]`)); err == nil {
		t.Fatal("Append accepted an array")
	}
	return &o
}

func TestObjectAppendReusesMemory(t *testing.T) {
	in := []byte(`{"to":"ana@example.com","subject":"Lunch","body":"See you at noon"}`)
	var o canonjson.Object
	dst := make([]byte, 0, 512)
	if err := o.Append(dst, in); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { o.Append(dst, in) }); n != 0 {
		t.Errorf("Append into a used Object: %v allocations, want 0", n)
	}
}
