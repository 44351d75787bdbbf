// Package canonjson turns JSON text into one canonical byte form, so that two
// inputs that mean the same thing digest to the same key and fingerprint.
//
// The canonical form is compact (no insignificant whitespace), object members
// are sorted by name (byte order of their UTF-8 encoding, which is code point
// order), strings use the shortest escapes (only '"', '\\' and control
// characters are escaped) and numbers are written in one normal form (see
// [appendNumber]). The parser is strict where leniency would let two different
// inputs collide or one input mean two things: invalid UTF-8, lone surrogate
// escapes, duplicate member names, trailing data and nesting deeper than
// [MaxDepth] are errors.
//
// Unicode normalisation (NFC) is not applied: "é" written as one code point and
// as "e" plus a combining accent are different inputs.
//
// The functions are safe for concurrent use.
package canonjson

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects accepted.
const MaxDepth = 64

// SyntaxError reports where and why input is not acceptable JSON.
type SyntaxError struct {
	Offset int    // byte offset of the problem
	Msg    string // what is wrong
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

// Canonical returns the canonical form of the JSON value in data.
func Canonical(data []byte) ([]byte, error) {
	p := parser{data: data}
	p.skipSpace()
	out, err := p.value(make([]byte, 0, len(data)))
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, p.errorf("unexpected data after the JSON value")
	}
	return out, nil
}

// Member is one name/value pair of an [Object]; Value is canonical JSON.
type Member struct {
	Name  string
	Value []byte
}

// Object is a parsed JSON object whose members are sorted by name.
type Object struct {
	members []Member
}

// ParseObject parses data, which must hold one JSON object.
func ParseObject(data []byte) (Object, error) {
	p := parser{data: data}
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != '{' {
		return Object{}, p.errorf("expected a JSON object")
	}
	members, err := p.members()
	if err != nil {
		return Object{}, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return Object{}, p.errorf("unexpected data after the JSON value")
	}
	return Object{members: members}, nil
}

// Members returns the members sorted by name. The slice must not be modified.
func (o Object) Members() []Member { return o.members }

// Get returns the canonical value of the member called name.
func (o Object) Get(name string) ([]byte, bool) {
	i, ok := slices.BinarySearchFunc(o.members, name, func(m Member, n string) int {
		return strings.Compare(m.Name, n)
	})
	if !ok {
		return nil, false
	}
	return o.members[i].Value, true
}

// AppendCanonical appends the canonical encoding of the members for which keep
// returns true (all members when keep is nil) to dst.
func (o Object) AppendCanonical(dst []byte, keep func(name string) bool) []byte {
	dst = append(dst, '{')
	first := true
	for _, m := range o.members {
		if keep != nil && !keep(m.Name) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, m.Name)
		dst = append(dst, ':')
		dst = append(dst, m.Value...)
	}
	return append(dst, '}')
}

type parser struct {
	data  []byte
	pos   int
	depth int
}

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: p.pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(dst []byte) ([]byte, error) {
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		members, err := p.members()
		if err != nil {
			return nil, err
		}
		return Object{members: members}.AppendCanonical(dst, nil), nil
	case c == '[':
		return p.array(dst)
	case c == '"':
		s, err := p.string()
		if err != nil {
			return nil, err
		}
		return appendString(dst, s), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number(dst)
	case c == 't':
		return p.literal(dst, "true")
	case c == 'f':
		return p.literal(dst, "false")
	case c == 'n':
		return p.literal(dst, "null")
	default:
		return nil, p.errorf("unexpected character %q", c)
	}
}

func (p *parser) literal(dst []byte, word string) ([]byte, error) {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return nil, p.errorf("invalid literal, expected %s", word)
	}
	p.pos += len(word)
	return append(dst, word...), nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errorf("nesting deeper than %d levels", MaxDepth)
	}
	return nil
}

// members parses an object starting at '{' and returns its members sorted.
func (p *parser) members() ([]Member, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '{'
	var members []Member
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return members, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.errorf("expected a member name in double quotes")
		}
		name, err := p.string()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errorf("expected ':' after member name %q", name)
		}
		p.pos++
		p.skipSpace()
		val, err := p.value(nil)
		if err != nil {
			return nil, err
		}
		members = append(members, Member{Name: name, Value: val})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in object")
		}
		if p.data[p.pos] == '}' {
			p.pos++
			break
		}
		if p.data[p.pos] != ',' {
			return nil, p.errorf("expected ',' or '}' in object")
		}
		p.pos++
	}
	p.depth--
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(members); i++ {
		if members[i].Name == members[i-1].Name {
			return nil, &SyntaxError{Offset: p.pos, Msg: fmt.Sprintf("duplicate member name %q", members[i].Name)}
		}
	}
	return members, nil
}

func (p *parser) array(dst []byte) ([]byte, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '['
	dst = append(dst, '[')
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return append(dst, ']'), nil
	}
	for {
		p.skipSpace()
		var err error
		if dst, err = p.value(dst); err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in array")
		}
		if p.data[p.pos] == ']' {
			p.pos++
			break
		}
		if p.data[p.pos] != ',' {
			return nil, p.errorf("expected ',' or ']' in array")
		}
		p.pos++
		dst = append(dst, ',')
	}
	p.depth--
	return append(dst, ']'), nil
}

// string parses a string starting at '"' and returns its decoded value.
func (p *parser) string() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := p.data[start:p.pos]
			if !utf8.Valid(s) {
				return "", &SyntaxError{Offset: start, Msg: "string is not valid UTF-8"}
			}
			p.pos++
			return string(s), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errorf("control character %#x in string", c)
		}
		p.pos++
	}
	buf := append([]byte(nil), p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return "", &SyntaxError{Offset: start, Msg: "string is not valid UTF-8"}
			}
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf("control character %#x in string", c)
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		// Escape sequence.
		if p.pos+1 >= len(p.data) {
			return "", p.errorf("unexpected end of input in escape")
		}
		esc := p.data[p.pos+1]
		p.pos += 2
		switch esc {
		case '"', '\\', '/':
			buf = append(buf, esc)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			if r >= 0xD800 && r < 0xDC00 {
				if p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
					return "", p.errorf("lone surrogate \\u%04X", r)
				}
				p.pos += 2
				lo, err := p.hex4()
				if err != nil {
					return "", err
				}
				if lo < 0xDC00 || lo >= 0xE000 {
					return "", p.errorf("invalid surrogate pair \\u%04X\\u%04X", r, lo)
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			} else if r >= 0xDC00 && r < 0xE000 {
				return "", p.errorf("lone surrogate \\u%04X", r)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.errorf("invalid escape \\%c", esc)
		}
	}
	return "", p.errorf("unexpected end of input in string")
}

func (p *parser) hex4() (rune, error) {
	if len(p.data)-p.pos < 4 {
		return 0, p.errorf("unexpected end of input in \\u escape")
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, p.errorf("invalid hex digit %q in \\u escape", c)
		}
	}
	p.pos += 4
	return r, nil
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string with the shortest escapes.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
