package agenttool

import (
	"context"
	"testing"
)

// FuzzParse feeds arbitrary model input to a wrapped and a typed tool. Input
// is refused or accepted, never a panic; accepted input parses again, from
// the form the tool received, to the same fingerprint and key.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"to":"ana@example.com","subject":"Lunch","body":"noon"}`,
		`{"To":"ana@example.com","subject":"Lunch"}`,
		`{"to":"x","meta":{"idempotency_key":"k"}}`,
		`{"to":"Ana\u00a0Lima","n":[1,2.50,{"a":null}]}`,
		"\ufeff{}", `[1]`, `null`, `"text"`, `{"to":"send_email/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`,
	} {
		f.Add(s)
	}
	type email struct {
		To      string   `json:"to"`
		Subject string   `json:"subject"`
		Body    string   `json:"body,omitempty"`
		CC      []string `json:"cc,omitempty"`
		Meta    *struct {
			Tag string `json:"tag"`
		} `json:"meta"`
	}
	store := &mapStore{m: map[string]Record{}}
	wrapped, err := newConfig("send_email", Options{Store: store, Class: Keyed, ModelKeys: StripModelKeys})
	if err != nil {
		f.Fatal(err)
	}
	wt := &Tool{name: "send_email", cfg: wrapped}
	typed, err := New("send_email", "", func(context.Context, email) (string, error) { return "", nil },
		Options{Store: store, Class: Keyed, IdentifyingFields: []string{"to", "subject"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if in, bad := wt.parse(raw); bad == nil {
			again, bad := wt.parse(in.forward)
			if bad != nil {
				t.Fatalf("the form the tool received, %q, is refused: %v", in.forward, bad)
			}
			if again.fingerprint != in.fingerprint || again.identifying != in.identifying {
				t.Fatalf("%q and its canonical form %q digest differently", raw, in.forward)
			}
		}
		if in, bad := typed.parse(raw); bad == nil {
			e := in.value.(email)
			if looseString(e.To) == "" || looseString(e.Subject) == "" {
				t.Fatalf("%q was accepted with an empty identifying field: %+v", raw, e)
			}
		}
	})
}

// FuzzLooseString checks that the loose form is a fixed point of itself, and
// that its ASCII fast path agrees with the full normalisation.
func FuzzLooseString(f *testing.F) {
	for _, s := range []string{"Ana Lima", " ana  lima ", "Ana\u00a0Lima", "ＡＮＡ", "ſ", "a\u200bb", "x y", "İstanbul"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l := looseString(s)
		if again := looseString(l); again != l {
			t.Fatalf("loose(%q) = %q, but loose of that is %q", s, l, again)
		}
		if ref := referenceLoose(s); l != ref {
			t.Fatalf("loose(%q) = %q; the reference gives %q", s, l, ref)
		}
		if isEmpty(s) != (l == "") {
			t.Fatalf("isEmpty(%q) = %v, but its loose form is %q", s, isEmpty(s), l)
		}
		if isPlainLower(s) {
			if slow := slowLoose(s); slow != s {
				t.Fatalf("fast path keeps %q; full normalisation gives %q", s, slow)
			}
		}
		if isASCII(s) {
			if fast, slow := asciiLoose(s), slowLoose(s); fast != slow {
				t.Fatalf("the ASCII path gives %q for %q; full normalisation gives %q", fast, s, slow)
			}
			if got, want := appendASCIILoose([]byte("x"), s), appendPart([]byte("x"), asciiLoose(s)); string(got) != string(want) {
				t.Fatalf("appendASCIILoose(%q) = %q, want %q", s, got, want)
			}
		}
	})
}

// slowLoose is looseString without its fast path.
func slowLoose(s string) string {
	return looseString("\u00a0" + s) // a leading space defeats the fast path and is trimmed
}
