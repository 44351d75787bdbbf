package canonjson_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/retrysafe/retrysafe/internal/canonjson"
)

// FuzzDecode checks Decode and DecodeShared against encoding/json with
// UseNumber on the canonical form of any input Canonical accepts, and
// CanonicalString against Canonical.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,-3e10,{"b":null}],"c":"x\"\\\n\u00e9\ud83d\ude00","d":true,"e":false}`, `[]`, `{}`, `"s"`, `0`, `[[[]]]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		canon, err := canonjson.Canonical([]byte(in))
		fromString, serr := canonjson.CanonicalString(in)
		if !bytes.Equal(canon, fromString) || (err == nil) != (serr == nil) {
			t.Fatalf("Canonical(%q) = %q, %v; CanonicalString gives %q, %v", in, canon, err, fromString, serr)
		}
		if err != nil {
			return
		}
		got, err := canonjson.Decode(canon)
		if err != nil {
			t.Fatalf("Decode(%q): %v", canon, err)
		}
		shared, err := canonjson.DecodeShared(canon, string(canon))
		if err != nil || !reflect.DeepEqual(shared, got) {
			t.Fatalf("DecodeShared(%q) = %#v, %v; Decode gives %#v", canon, shared, err, got)
		}
		dec := json.NewDecoder(bytes.NewReader(canon))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json on %q: %v", canon, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode(%q) = %#v, encoding/json gives %#v", canon, got, want)
		}
	})
}
