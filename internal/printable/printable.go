// Package printable is the one filter that text from outside — a
// destination's error or result, a model's input, a label, a person's
// note — passes through before a person reads it: on a terminal (the
// operator commands), in a browser (the approvals console) or in a log.
//
// It makes visible, as \u escapes, the characters that change what a
// person sees rather than show something: C0 and C1 control characters
// (ESC, U+009B CSI and U+009D OSC start terminal sequences that recolour,
// clear or retitle a terminal; a carriage return overwrites a line), DEL,
// the bidirectional formatting characters that reorder text (overrides,
// embeddings, isolates and marks), and the line and paragraph separators.
// Bytes that are not UTF-8 are shown as \x escapes (a lone 0x9B byte is a
// CSI to an 8-bit terminal). Everything else passes unchanged, and text
// with nothing to filter is returned as it is, without allocating.
//
// In JSON text the \u escapes are the JSON escapes of the same characters:
// filtering a line of encoded JSON keeps its meaning.
package printable

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text returns s with every character that is not printable made visible,
// except tabs and newlines, which it keeps: for text shown with its lines.
func Text(s string) string { return filter(s, false) }

// Line returns s on one line: tabs, newlines and the other characters
// Text filters are made visible as Text does, except that tabs and
// newlines become spaces. For table cells and log values.
func Line(s string) string { return filter(s, true) }

func filter(s string, line bool) string {
	i := firstSuspect(s)
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case (r == '\t' || r == '\n') && line:
			b.WriteByte(' ')
		case r == '\t' || r == '\n':
			b.WriteRune(r)
		case hidden(r):
			b.WriteString(`\u`)
			h := strconv.FormatUint(uint64(r), 16)
			b.WriteString("0000"[len(h):])
			b.WriteString(h)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// firstSuspect returns the index of the first character to filter, or
// len(s): clean text costs one pass and no allocation.
func firstSuspect(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return i
		case c < 0x80:
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if (r == utf8.RuneError && size == 1) || hidden(r) {
				return i
			}
			i += size - 1
		}
	}
	return len(s)
}

// hidden reports whether r changes what a person sees rather than showing
// something: a control character (C0, DEL, C1), a bidirectional formatting
// character, or a line or paragraph separator.
func hidden(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, // ARABIC LETTER MARK
		r == 0x200e, r == 0x200f, // LEFT-TO-RIGHT and RIGHT-TO-LEFT MARK
		r >= 0x202a && r <= 0x202e, // embeddings, pop, overrides
		r >= 0x2066 && r <= 0x2069, // isolates
		r == 0x2028, r == 0x2029:   // line and paragraph separators
		return true
	}
	return false
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}
