package agenttool

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"

	"github.com/retrysafe/retrysafe/envelope"
)

// referenceLoose is the loose form as its definition reads, without any of
// looseString's shortcuts (the ASCII paths, the table of invisible
// characters, the cheaper fixed-point check): a key derived from either
// must be the same.
func referenceLoose(s string) string {
	blanks := "\u115f\u1160\u3164\uffa0\u2800"
	s = strings.Map(func(r rune) rune {
		switch {
		case strings.ContainsRune(blanks, r):
			return ' '
		case ignorableRune(r):
			return -1
		}
		return r
	}, s)
	for range 4 {
		next := norm.NFKC.String(cases.Fold().String(norm.NFKC.String(s)))
		if next == s {
			break
		}
		s = next
	}
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case unicode.IsSpace(r) || strings.ContainsRune(blanks, r):
			space = b.Len() > 0
		case ignorableRune(r):
		default:
			if space {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(r)
		}
	}
	// A word with Latin letters reads the letters that imitate them as
	// Latin.
	words := strings.Split(b.String(), " ")
	for i, w := range words {
		latin, other := false, false
		for _, r := range w {
			_, looks := lookalikes[r]
			latin = latin || unicode.Is(unicode.Latin, r)
			other = other || (looks && !unicode.Is(unicode.Latin, r))
		}
		if latin && other {
			words[i] = strings.Map(func(r rune) rune {
				if m, ok := lookalikes[r]; ok {
					return m
				}
				return r
			}, w)
		}
	}
	return strings.Join(words, " ")
}

// referenceSkeleton is skeleton as its definition reads, without its
// shortcuts.
func referenceSkeleton(name string) string {
	var b strings.Builder
	for _, r := range norm.NFKD.String(cases.Fold().String(norm.NFKD.String(name))) {
		if ignorableRune(r) {
			continue
		}
		if m, ok := lookalikes[r]; ok {
			r = m
		}
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// Every character, alone and between letters, has the loose form and the
// skeleton the definitions give it, is invisible exactly when the table
// says so, and is empty exactly when its loose form is.
func TestLooseFormOfEveryCharacter(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0x30000 && r < 0xe0000 || r >= 0xd800 && r < 0xe000 || r >= 0xf0000 {
			continue // unassigned planes, surrogates and private use
		}
		if ignorable(r) != ignorableRune(r) {
			t.Fatalf("ignorable(%U) = %v, want %v", r, ignorable(r), ignorableRune(r))
		}
		for _, s := range []string{string(r), "a" + string(r) + "b"} {
			l := looseString(s)
			if ref := referenceLoose(s); l != ref {
				t.Fatalf("loose(%q) = %q; the reference gives %q", s, l, ref)
			}
			if isEmpty(s) != (l == "") {
				t.Fatalf("isEmpty(%q) = %v, but its loose form is %q", s, isEmpty(s), l)
			}
			if sk, ref := skeleton(s), referenceSkeleton(s); sk != ref {
				t.Fatalf("skeleton(%q) = %q; the reference gives %q", s, sk, ref)
			}
		}
	}
}

// The loose form of each identifying value and each member name is
// computed once per call: what a call allocates for a value whose loose
// form is costly (U+FDFA: 18 characters for one) is about what computing
// that loose form once allocates — for a member name, its loose form and
// its skeleton (keys in disguise are looked for by it) — not twice or
// three times that.
func TestLooseFormIsComputedOncePerCall(t *testing.T) {
	type email struct {
		To   string            `json:"to"`
		Meta map[string]string `json:"meta"`
	}
	tool, err := New("send_email", "", func(_ context.Context, e email) (string, error) { return "", nil },
		Options{Store: &mapStore{m: map[string]Record{}}, Class: Keyed})
	if err != nil {
		t.Fatal(err)
	}
	costly := strings.Repeat("\ufdfa", 10000)
	allocated := func(f func()) uint64 {
		f() // warm up: tables built on first use
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	value := allocated(func() { looseString(costly) })
	name := allocated(func() { looseString(costly); skeleton(costly) })
	for _, tt := range []struct {
		what, input string
		once        uint64
	}{
		{"a value", `{"to":"` + costly + `","meta":{"k":"v"}}`, value},
		{"a value with trailing spaces", `{"to":"` + costly + `  ","meta":{"k":"v"}}`, value},
		{"a member name", `{"to":"ana","meta":{"` + costly + `":"v","k":"w"}}`, name},
	} {
		if _, bad := tool.parse(tt.input); bad != nil {
			t.Fatalf("%s: %v", tt.what, bad)
		}
		got := allocated(func() { tool.parse(tt.input) })
		if got > tt.once*3/2 {
			t.Errorf("%s: a call allocates %d bytes; its loose form alone, once, %d", tt.what, got, tt.once)
		}
	}
}

// The loose form and the skeleton of a member name are computed once per
// call, also when the name is not one of a typed tool's fields and the
// call is refused (invalid_input: "unknown field"): the refusal looks for
// the field it was meant to be, and must not fold the model's name again
// for each field the tool has. Otherwise what a refused call costs grows
// with the number of the tool's fields, past what docs/performance.md
// gives for the costliest input: a 64 KiB name in U+FDFA costs a tool of
// twenty fields about a second and 110 MB.
func TestLooseFormIsComputedOnceForAMemberNameTheToolDoesNotKnow(t *testing.T) {
	type order struct {
		Customer string `json:"customer"`
		Item     string `json:"item"`
		Quantity int    `json:"quantity"`
		Address  string `json:"address"`
		City     string `json:"city"`
		Country  string `json:"country"`
		Phone    string `json:"phone"`
		Note     string `json:"note"`
	}
	tool, err := New("place_order", "", func(_ context.Context, o order) (string, error) { return "", nil },
		Options{Store: &mapStore{m: map[string]Record{}}, Class: Keyed})
	if err != nil {
		t.Fatal(err)
	}
	costly := strings.Repeat("\ufdfa", 3000)
	allocated := func(f func()) uint64 {
		f() // warm up: tables built on first use
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	once := allocated(func() { looseString(costly); skeleton(costly) })
	input := `{"customer":"ana","item":"tea","` + costly + `":"x"}`
	_, bad := tool.parse(input)
	if bad == nil || bad.Code != envelope.CodeInvalidInput || !strings.Contains(bad.Message, "unknown field") {
		t.Fatalf("a member the tool does not have: %v; want invalid_input, unknown field", bad)
	}
	if got := allocated(func() { tool.parse(input) }); got > once*3/2 {
		t.Errorf("refusing a member name the tool does not know allocates %d bytes; its loose form and skeleton, once, %d (%.1f times)",
			got, once, float64(got)/float64(once))
	}
}
