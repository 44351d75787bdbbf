package agenttool

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// The loose form of a value is what a key compares: two values the model
// would call the same ("Ana Lima", "ANA  LIMA ", "Ana\u00a0Lima") have one
// loose form. Strings are stripped of invisible characters (format
// characters, variation selectors, other default-ignorable code points,
// control characters), their blank-looking letters (Hangul fillers, the
// Braille blank) read as spaces, normalised (Unicode NFKC), case-folded,
// trimmed, and their runs of white space collapsed to one space; in a word
// that mixes Latin letters with letters that only look Latin (a Cyrillic
// "а" in "Аna"), those letters are read as the Latin ones they imitate.
// The fingerprint keeps the exact form, so a cosmetic
// variant meets the earlier action's key and is refused
// (key_reused_with_different_input) or replayed if identical: never run as a
// second action.

var folder = cases.Fold()

// looseString returns the loose form of s.
func looseString(s string) string {
	if isPlainLower(s) {
		return s // nothing to normalise: the common case for identifiers
	}
	if isASCII(s) {
		return asciiLoose(s)
	}
	// Invisible characters go first: one between a letter and its
	// combining mark would keep them from composing.
	s = strings.Map(func(r rune) rune {
		switch {
		case blank(r):
			return ' '
		case ignorable(r):
			return -1
		}
		return r
	}, s)
	// Folding and normalising can each undo what the other did (some
	// letters fold to a form that normalises back): repeat to a fixed point.
	for range 4 {
		next, fixed := foldNFKC(s)
		if next == s {
			break
		}
		s = next
		if fixed {
			break
		}
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		switch {
		case unicode.IsSpace(r) || blank(r):
			space = b.Len() > 0
		case ignorable(r):
		default:
			if space {
				b.WriteByte(' ')
				space = false
			}
			b.WriteRune(r)
		}
	}
	return unmixed(b.String())
}

// blank reports whether r is a letter or symbol that renders as empty
// space: the Hangul fillers, which are default-ignorable but show as a
// blank, and the Braille pattern blank.
func blank(r rune) bool {
	switch r {
	case '\u115f', '\u1160', '\u3164', '\uffa0', '\u2800':
		return true
	}
	return false
}

// unmixed reads the letters that only look Latin as the Latin ones they
// imitate, in each word of s (a loose form: folded, one space between
// words) that has Latin letters too. A word of one script is left as it
// is: "Анна" stays Cyrillic, "Аna" (a Cyrillic А) reads "ana".
func unmixed(s string) string {
	var out []byte
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != ' ' {
			continue
		}
		word := s[start:i]
		if mixedLatin(word) {
			if out == nil {
				out = append(make([]byte, 0, len(s)), s[:start]...)
			}
			for _, r := range word {
				if m, ok := lookalikes[r]; ok {
					r = m
				}
				out = utf8.AppendRune(out, r)
			}
		} else if out != nil {
			out = append(out, word...)
		}
		if out != nil && i < len(s) {
			out = append(out, ' ')
		}
		start = i + 1
	}
	if out == nil {
		return s
	}
	return string(out)
}

// mixedLatin reports whether word has both a Latin letter and a letter that
// only looks Latin.
func mixedLatin(word string) bool {
	latin, other := false, false
	for _, r := range word {
		switch {
		case r < utf8.RuneSelf:
			latin = latin || ('a' <= r && r <= 'z')
		case unicode.Is(unicode.Latin, r):
			latin = true
		default:
			if _, ok := lookalikes[r]; ok {
				other = true
			}
		}
	}
	return latin && other
}

// foldNFKC returns NFKC(fold(NFKC(s))), and whether that is a fixed point
// (another round would give it back unchanged): it is when folding changed
// nothing, or changes nothing of the result. It skips what cannot change
// anything (normalising again what folding left as it was), and checks
// with scans that do not copy (a string that folding or normalisation
// leaves unchanged is returned as it is).
func foldNFKC(s string) (string, bool) {
	n := norm.NFKC.String(s)
	f := folder.String(n)
	if f == n {
		return n, true
	}
	next := norm.NFKC.String(f)
	return next, folder.String(next) == next
}

// asciiLoose is looseString for ASCII text, in one pass: NFKC leaves ASCII
// as it is, and case folding is lower-casing.
func asciiLoose(s string) string {
	return string(appendASCIIText(make([]byte, 0, len(s)), s))
}

// appendASCIILoose appends the loose form of ASCII text as appendPart would
// append it: its length, then its bytes.
func appendASCIILoose(b []byte, s string) []byte {
	at := len(b)
	b = appendASCIIText(binaryLen(b, 0), s)
	binary.BigEndian.PutUint64(b[at:], uint64(len(b)-at-8))
	return b
}

// appendASCIIText appends the loose form of ASCII text: it grows b once
// (the loose form is never longer than the text) and writes in place.
func appendASCIIText(b []byte, s string) []byte {
	start := len(b)
	b = slices.Grow(b, len(s))
	w := b[:start+len(s)]
	n := start
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch asciiClass[c] {
		case asciiUpper:
			c += 'a' - 'A'
		case asciiSpace:
			space = n > start
			continue
		case asciiControl:
			continue // invisible
		}
		if space {
			w[n] = ' ' // a run of white space before c, which is not the first
			n++
			space = false
		}
		w[n] = c
		n++
	}
	return w[:n]
}

// Classes of ASCII bytes for the loose form.
const (
	asciiKeep = iota
	asciiUpper
	asciiSpace
	asciiControl
)

var asciiClass = func() (t [256]byte) {
	for c := range t {
		switch {
		case c == ' ' || c >= '\t' && c <= '\r':
			t[c] = asciiSpace
		case c < 0x20 || c == 0x7f:
			t[c] = asciiControl
		case c >= 'A' && c <= 'Z':
			t[c] = asciiUpper
		}
	}
	return t
}()

// appendASCIISkeleton appends the skeleton of an ASCII name: its letters,
// lower-cased, and digits.
func appendASCIISkeleton(b []byte, name string) []byte {
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b = append(b, c)
		}
	}
	return b
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// ignorable reports whether r is invisible: a format character (zero-width
// spaces and joiners, byte-order marks, bidi marks, soft hyphens), a
// variation selector, another default-ignorable code point (the combining
// grapheme joiner, Hangul fillers), or a control character that is not
// white space. Code points of the Basic Multilingual Plane are looked up in
// a table built on first use: the loose form asks this of every character.
func ignorable(r rune) bool {
	if r < utf8.RuneSelf {
		return (r < 0x20 || r == 0x7f) && !unicode.IsSpace(r)
	}
	if r <= 0xffff {
		ignorableOnce.Do(buildIgnorableBMP)
		return ignorableBMP[r>>6]&(1<<(r&63)) != 0
	}
	return ignorableRune(r)
}

func ignorableRune(r rune) bool {
	return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || (unicode.IsControl(r) && !unicode.IsSpace(r))
}

var (
	ignorableOnce sync.Once
	ignorableBMP  [0x10000 / 64]uint64 // bit r: ignorableRune(r)
)

func buildIgnorableBMP() {
	for _, table := range []*unicode.RangeTable{unicode.Cf, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point, unicode.Cc} {
		for _, rg := range table.R16 {
			for r := rune(rg.Lo); r <= rune(rg.Hi); r += rune(rg.Stride) {
				if ignorableRune(r) {
					ignorableBMP[r>>6] |= 1 << (r & 63)
				}
			}
		}
	}
}

// isPlainLower reports whether s is printable ASCII without upper-case
// letters and without leading, trailing or doubled spaces: its own loose
// form.
func isPlainLower(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || (c >= 'A' && c <= 'Z') {
			if c != ' ' || i == 0 || i == len(s)-1 || s[i+1] == ' ' {
				return false
			}
		}
	}
	return true
}

// appendLoose appends an unambiguous encoding of the loose form of v, a value
// decoded by encoding/json with UseNumber, to b. Every part is tagged and
// length-prefixed, so two different loose values never share an encoding.
// exact keeps strings as they are (a field whose case or spacing matters).
// Object members are ordered by their loose names, which names keeps (nil:
// computed here).
func appendLoose(b []byte, v any, exact bool, names *looseNames) []byte {
	str := func(s string) string {
		if exact {
			return s
		}
		return looseString(s)
	}
	switch v := v.(type) {
	case nil:
		return append(b, 'n')
	case bool:
		if v {
			return append(b, 't')
		}
		return append(b, 'f')
	case json.Number:
		return appendPart(append(b, 'd'), string(v))
	case string:
		if !exact && isASCII(v) {
			return appendASCIILoose(append(b, 's'), v)
		}
		return appendPart(append(b, 's'), str(v))
	case []any:
		b = binaryLen(append(b, 'a'), len(v))
		for _, item := range v {
			b = appendLoose(b, item, exact, names)
		}
		return b
	case map[string]any:
		sorted := make([][2]string, 0, len(v)) // loose name, name
		for name := range v {
			sorted = append(sorted, [2]string{names.of(name), name})
		}
		slices.SortFunc(sorted, func(x, y [2]string) int { return strings.Compare(x[0], y[0]) })
		b = binaryLen(append(b, 'o'), len(v))
		for _, n := range sorted {
			b = appendPart(b, n[0])
			b = appendLoose(b, v[n[1]], exact, names)
		}
		return b
	}
	panic(fmt.Sprintf("agenttool: appendLoose: unexpected %T", v))
}

// isEmpty reports whether v says nothing: null, a string of white space
// (after the loose form), an empty array or an empty object. It does not
// compute a string's loose form: the loose form of a string is empty
// exactly when that of each of its characters is (normalising and folding
// never turn a visible character into nothing, nor compose white space and
// invisible characters into a visible one), and most characters are
// visible at a glance.
func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		var last rune = -1 // the last character whose loose form was computed
		for _, r := range v {
			switch {
			case unicode.IsSpace(r) || ignorable(r) || blank(r) || r == last:
			case r < utf8.RuneSelf:
				return false
			default:
				if looseString(string(r)) != "" {
					return false
				}
				last = r
			}
		}
		return true
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

// skeleton folds a member name for comparison with key-like names: Unicode
// NFKD with combining marks dropped, letters that imitate Latin ones mapped
// to them, case folded, and everything but letters and digits removed. So
// "Idempotency-Key", "idempotency key ", "ıdempotency_key" (dotless ı),
// full-width letters and names with zero-width spaces all fold to
// "idempotencykey".
func skeleton(name string) string {
	if isASCII(name) {
		return string(appendASCIISkeleton(make([]byte, 0, len(name)), name))
	}
	d := norm.NFKD.String(name)
	s := folder.String(d)
	if s != d {
		s = norm.NFKD.String(s) // folding changed it: decompose what it made
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if ignorable(r) {
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

// lookalikes maps letters that render like Latin letters to them. It covers
// the letters a model (or a person) would use to disguise a field name:
// dotless i and j, small capitals, and the Cyrillic, Greek and Armenian
// letters that look Latin.
var lookalikes = map[rune]rune{
	'ı': 'i', 'ȷ': 'j', 'ɩ': 'i', 'ʏ': 'y', 'ɡ': 'g', 'ɒ': 'a', 'ɛ': 'e', 'ɔ': 'o', 'ʋ': 'u', 'ƿ': 'p',
	// small capitals
	'ᴀ': 'a', 'ʙ': 'b', 'ᴄ': 'c', 'ᴅ': 'd', 'ᴇ': 'e', 'ꜰ': 'f', 'ɢ': 'g', 'ʜ': 'h', 'ɪ': 'i', 'ᴊ': 'j', 'ᴋ': 'k',
	'ʟ': 'l', 'ᴍ': 'm', 'ɴ': 'n', 'ᴏ': 'o', 'ᴘ': 'p', 'ǫ': 'q', 'ʀ': 'r', 'ꜱ': 's', 'ᴛ': 't', 'ᴜ': 'u', 'ᴠ': 'v',
	'ᴡ': 'w', 'ᴢ': 'z',
	// Armenian
	'օ': 'o', 'ս': 'u', 'ց': 'g', 'հ': 'h', 'ո': 'n', 'ռ': 'n', 'զ': 'q', 'ա': 'w', 'ե': 'e', 'լ': 'l',
	// Cyrillic
	'а': 'a', 'в': 'b', 'е': 'e', 'ё': 'e', 'к': 'k', 'м': 'm', 'н': 'h', 'о': 'o', 'р': 'p', 'с': 'c',
	'т': 't', 'у': 'y', 'х': 'x', 'ѕ': 's', 'і': 'i', 'ї': 'i', 'ј': 'j', 'ԁ': 'd', 'ԛ': 'q', 'ԝ': 'w',
	'һ': 'h', 'ӏ': 'l', 'ɑ': 'a',
	// Greek
	'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't',
	'υ': 'u', 'χ': 'x', 'ω': 'w', 'ϲ': 'c', 'ϳ': 'j', 'ζ': 'z',
}
