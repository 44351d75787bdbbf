// Package canonjson turns JSON text into one canonical byte form, so that two
// inputs that mean the same thing digest to the same key and fingerprint.
//
// The canonical form is compact (no insignificant whitespace), object members
// are sorted by name (byte order of their UTF-8 encoding, which is code point
// order), strings use the shortest escapes (only '"', '\\' and control
// characters are escaped) and numbers are written in one normal form (see
// [parser.number]). The parser is strict where leniency would let two
// different inputs collide or one input mean two things: invalid UTF-8, lone
// surrogate escapes, duplicate member names, trailing data and nesting deeper
// than [MaxDepth] are errors.
//
// Unicode normalisation (NFC) is not applied: "é" written as one code point
// and as "e" plus a combining accent are different inputs.
//
// The parser writes the canonical form in one pass into one buffer, sorting
// each object's members in place, so that a typical tool input costs a few
// allocations. The functions are safe for concurrent use.
package canonjson

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"
)

// parsers keeps parsers' scratch space (member spans, decoded names) between
// calls.
var parsers = sync.Pool{New: func() any { return &parser{spans: make([]span, 0, 16)} }}

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
	return canonical(data, make([]byte, 0, 2*len(data)+16))
}

// CanonicalString is [Canonical] of a string, in one allocation: the
// returned form shares its memory with a copy of s.
func CanonicalString(s string) ([]byte, error) {
	slab := make([]byte, len(s), 3*len(s)+16)
	copy(slab, s)
	return canonical(slab, slab[len(s):len(s)])
}

// canonical writes the canonical form of data to buf, which must have room
// for twice data.
func canonical(data, buf []byte) ([]byte, error) {
	if len(data) > maxInput {
		return nil, &SyntaxError{Msg: fmt.Sprintf("input of %d bytes is larger than %d", len(data), maxInput)}
	}
	p := parsers.Get().(*parser)
	*p = parser{data: data, buf: buf, spans: p.spans[:0], names: p.names[:0]}
	p.skipSpace()
	err := p.value()
	if err == nil {
		p.skipSpace()
		if p.pos != len(p.data) {
			err = p.errorf("unexpected data after the JSON value")
		}
	}
	out := p.buf
	*p = parser{spans: p.spans[:0], names: p.names[:0]} // keep the scratch, drop the rest
	parsers.Put(p)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Object is a parsed JSON object in canonical form, with its top-level
// members at hand. An Object refers to the input it was parsed from; the
// caller must not change that input while using the Object.
type Object struct {
	buf     []byte   // dst given to AppendObject, then the canonical form
	start   int      // where the canonical form begins in buf
	data    []byte   // the input, for undecoded member names
	names   []byte   // decoded member names that had escapes
	members []member // top-level members, in canonical order
}

// member locates one top-level member: its decoded name (in data or in
// names) and its canonical name token and value (in buf).
type member struct {
	nameOff, nameLen int32
	tokOff, valOff   int32 // name token "…" starts at tokOff; value spans valOff..end
	end              int32
	nameInData       bool
}

// ParseObject parses data, which must hold one JSON object.
func ParseObject(data []byte) (Object, error) {
	return AppendObject(make([]byte, 0, len(data)), data)
}

// AppendObject parses data, which must hold one JSON object, and appends its
// canonical form to dst: [Object.Buffer] is dst followed by the canonical
// form, [Object.Canonical] the canonical form alone. Putting a digest's
// domain tag in dst lets the caller hash tag and form without a copy.
func AppendObject(dst, data []byte) (Object, error) {
	var o Object
	err := o.Append(dst, data)
	return o, err
}

// Append is [AppendObject] into o, reusing the memory o holds from an
// earlier parse; o is overwritten, also on error.
func (o *Object) Append(dst, data []byte) error {
	if cap(dst)-len(dst) < 2*len(data)+2 {
		// Values are written once, then again in sorted order before being
		// moved down: room for twice the input avoids regrowing.
		dst = append(make([]byte, 0, len(dst)+2*len(data)+16), dst...)
	}
	if len(data) > maxInput || len(dst) > maxInput {
		*o = Object{members: o.members[:0], names: o.names[:0]}
		return &SyntaxError{Msg: fmt.Sprintf("input of %d bytes (with %d before it) is larger than %d", len(data), len(dst), maxInput)}
	}
	p := parsers.Get().(*parser)
	*p = parser{data: data, buf: dst, top: true, spans: p.spans[:0], names: p.names[:0], topMembers: o.members[:0]}
	err := p.topObject()
	if err == nil {
		*o = Object{buf: p.buf, start: len(dst), data: data, names: append(o.names[:0], p.names...), members: p.topMembers}
	} else {
		*o = Object{members: p.topMembers[:0], names: o.names[:0]}
	}
	*p = parser{spans: p.spans[:0], names: p.names[:0]} // keep the scratch, drop the rest
	parsers.Put(p)
	return err
}

// MaxInput is the largest input, in bytes, that [Canonical] and
// [Object.Append] accept; offsets into it are kept in 32 bits.
const MaxInput = 1 << 28

var maxInput = MaxInput // lowered by tests

func (p *parser) topObject() error {
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != '{' {
		return p.errorf("expected a JSON object")
	}
	if err := p.object(); err != nil {
		return err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return p.errorf("unexpected data after the JSON value")
	}
	return nil
}

// Canonical returns the canonical form of the object.
func (o Object) Canonical() []byte { return o.buf[o.start:] }

// Buffer returns the dst given to [AppendObject] followed by the canonical
// form.
func (o Object) Buffer() []byte { return o.buf }

// Len returns the number of top-level members.
func (o Object) Len() int { return len(o.members) }

// Name returns the decoded name of the i-th member in canonical order. The
// slice must not be modified.
func (o Object) Name(i int) []byte {
	m := o.members[i]
	if m.nameInData {
		return o.data[m.nameOff : m.nameOff+m.nameLen]
	}
	return o.names[m.nameOff : m.nameOff+m.nameLen]
}

// Value returns the canonical value of the i-th member.
func (o Object) Value(i int) []byte {
	m := o.members[i]
	return o.buf[m.valOff:m.end]
}

// Member is one name/value pair of an [Object]; Value is canonical JSON.
type Member struct {
	Name  string
	Value []byte
}

// Members returns the members in canonical order, as a new slice.
func (o Object) Members() []Member {
	out := make([]Member, len(o.members))
	for i := range o.members {
		out[i] = Member{Name: string(o.Name(i)), Value: o.Value(i)}
	}
	return out
}

// Get returns the canonical value of the member called name.
func (o Object) Get(name string) ([]byte, bool) {
	i, ok := slices.BinarySearchFunc(o.members, name, func(m member, n string) int {
		var b []byte
		if m.nameInData {
			b = o.data[m.nameOff : m.nameOff+m.nameLen]
		} else {
			b = o.names[m.nameOff : m.nameOff+m.nameLen]
		}
		return bytes.Compare(b, []byte(n))
	})
	if !ok {
		return nil, false
	}
	return o.Value(i), true
}

// AppendCanonical appends the canonical encoding of the members for which keep
// returns true (all members when keep is nil) to dst.
func (o Object) AppendCanonical(dst []byte, keep func(name []byte) bool) []byte {
	dst = append(dst, '{')
	first := true
	for i, m := range o.members {
		if keep != nil && !keep(o.Name(i)) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, o.buf[m.tokOff:m.end]...)
	}
	return append(dst, '}')
}

// span is a member of an object being parsed.
type span struct {
	nameOff, nameLen int32
	valOff, valEnd   int32 // in buf
	nameInData       bool
	rawName          bool // the name had no escapes: its token is data[nameOff-1 : nameOff+nameLen+1]
}

type parser struct {
	data  []byte
	pos   int
	depth int
	buf   []byte // the canonical form under construction
	spans []span // members of the objects being parsed, innermost last
	names []byte // decoded names that had escapes

	top        bool     // record the top-level object's members
	topMembers []member // …here

	shared string // Decode: string(data), whose substrings strings without escapes are
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

func (p *parser) value() error {
	if p.pos >= len(p.data) {
		return p.errorf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		start := len(p.buf)
		s, raw, err := p.string(&p.buf)
		if err != nil {
			return err
		}
		if raw {
			// Without escapes the token is already canonical, quotes and all.
			p.buf = append(p.buf, p.data[p.pos-len(s)-2:p.pos]...)
			return nil
		}
		// The decoded string was put at start; encode it canonically.
		decoded := append([]byte(nil), p.buf[start:]...)
		p.buf = appendString(p.buf[:start], decoded)
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	default:
		return p.errorf("unexpected character %q", c)
	}
}

func (p *parser) literal(word string) error {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.errorf("invalid literal, expected %s", word)
	}
	p.pos += len(word)
	p.buf = append(p.buf, word...)
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errorf("nesting deeper than %d levels", MaxDepth)
	}
	return nil
}

func (p *parser) spanName(s span) []byte {
	if s.nameInData {
		return p.data[s.nameOff : s.nameOff+s.nameLen]
	}
	return p.names[s.nameOff : s.nameOff+s.nameLen]
}

// object parses an object at '{' and appends its canonical form to buf.
func (p *parser) object() error {
	if err := p.enter(); err != nil {
		return err
	}
	top := p.top && p.depth == 1
	p.pos++ // '{'
	start := len(p.buf)
	base := len(p.spans)
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
	} else {
		for {
			p.skipSpace()
			if p.pos >= len(p.data) || p.data[p.pos] != '"' {
				return p.errorf("expected a member name in double quotes")
			}
			sp, err := p.name()
			if err != nil {
				return err
			}
			p.skipSpace()
			if p.pos >= len(p.data) || p.data[p.pos] != ':' {
				return p.errorf("expected ':' after member name %q", p.spanName(sp))
			}
			p.pos++
			p.skipSpace()
			sp.valOff = int32(len(p.buf))
			if err := p.value(); err != nil {
				return err
			}
			sp.valEnd = int32(len(p.buf))
			p.spans = append(p.spans, sp)
			p.skipSpace()
			if p.pos >= len(p.data) {
				return p.errorf("unexpected end of input in object")
			}
			if p.data[p.pos] == '}' {
				p.pos++
				break
			}
			if p.data[p.pos] != ',' {
				return p.errorf("expected ',' or '}' in object")
			}
			p.pos++
		}
	}
	p.depth--
	members := p.spans[base:]
	p.sortSpans(members)
	for i := 1; i < len(members); i++ {
		if bytes.Equal(p.spanName(members[i]), p.spanName(members[i-1])) {
			return &SyntaxError{Offset: p.pos, Msg: fmt.Sprintf("duplicate member name %q", p.spanName(members[i]))}
		}
	}
	// Write the sorted object after the values, then move it down over them.
	out := len(p.buf)
	p.buf = append(p.buf, '{')
	if top {
		p.topMembers = slices.Grow(p.topMembers[:0], len(members))
	}
	for i, m := range members {
		if i > 0 {
			p.buf = append(p.buf, ',')
		}
		tok := len(p.buf)
		if m.rawName {
			p.buf = append(p.buf, p.data[m.nameOff-1:m.nameOff+m.nameLen+1]...)
		} else {
			p.buf = appendString(p.buf, p.spanName(m))
		}
		p.buf = append(p.buf, ':')
		val := len(p.buf)
		p.buf = append(p.buf, p.buf[m.valOff:m.valEnd]...)
		if top {
			shift := out - start
			p.topMembers = append(p.topMembers, member{
				nameOff: m.nameOff, nameLen: m.nameLen, nameInData: m.nameInData,
				tokOff: int32(tok - shift), valOff: int32(val - shift), end: int32(len(p.buf) - shift),
			})
		}
	}
	p.buf = append(p.buf, '}')
	n := copy(p.buf[start:], p.buf[out:])
	p.buf = p.buf[:start+n]
	p.spans = p.spans[:base]
	return nil
}

// sortSpans sorts members by name; insertion sort for the small objects tool
// inputs are made of.
func (p *parser) sortSpans(s []span) {
	if len(s) > 16 {
		slices.SortFunc(s, func(a, b span) int { return bytes.Compare(p.spanName(a), p.spanName(b)) })
		return
	}
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && bytes.Compare(p.spanName(s[j]), p.spanName(s[j-1])) < 0; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// name parses a member name at '"'.
func (p *parser) name() (span, error) {
	s, raw, err := p.string(&p.names)
	if err != nil {
		return span{}, err
	}
	if raw {
		return span{nameOff: int32(p.pos - 1 - len(s)), nameLen: int32(len(s)), nameInData: true, rawName: true}, nil
	}
	return span{nameOff: int32(len(p.names) - len(s)), nameLen: int32(len(s))}, nil
}

func (p *parser) array() error {
	if err := p.enter(); err != nil {
		return err
	}
	p.pos++ // '['
	p.buf = append(p.buf, '[')
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		p.buf = append(p.buf, ']')
		return nil
	}
	for {
		p.skipSpace()
		if err := p.value(); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.errorf("unexpected end of input in array")
		}
		if p.data[p.pos] == ']' {
			p.pos++
			break
		}
		if p.data[p.pos] != ',' {
			return p.errorf("expected ',' or ']' in array")
		}
		p.pos++
		p.buf = append(p.buf, ',')
	}
	p.depth--
	p.buf = append(p.buf, ']')
	return nil
}

// string parses a string at '"'. Without escapes it returns the raw bytes
// (a subslice of data) and raw=true; with escapes it appends the decoded
// string to *scratch and returns it (a subslice of *scratch).
func (p *parser) string(scratch *[]byte) (s []byte, raw bool, err error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: find the closing quote, then check the run for escapes and
	// control characters in one tight loop.
	if end := bytes.IndexByte(p.data[start:], '"'); end >= 0 {
		run := p.data[start : start+end]
		if clean, ascii := scanRun(run); clean {
			if !ascii && !utf8.Valid(run) {
				return nil, false, &SyntaxError{Offset: start, Msg: "string is not valid UTF-8"}
			}
			p.pos = start + end + 1
			return run, true, nil
		}
	}
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' || c == '\\' {
			break
		}
		if c < 0x20 {
			return nil, false, p.errorf("control character %#x in string", c)
		}
		p.pos++
	}
	if p.pos < len(p.data) && p.data[p.pos] == '"' {
		s := p.data[start:p.pos]
		if !utf8.Valid(s) {
			return nil, false, &SyntaxError{Offset: start, Msg: "string is not valid UTF-8"}
		}
		p.pos++
		return s, true, nil
	}
	return p.escaped(scratch, start)
}

// escaped decodes the rest of a string with escapes, from p.pos (an escape
// or the end of the input), the string's content having begun at start.
func (p *parser) escaped(scratch *[]byte, start int) (s []byte, raw bool, err error) {
	base := len(*scratch)
	buf := append(*scratch, p.data[start:p.pos]...)
	defer func() { *scratch = buf }()
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			if !utf8.Valid(buf[base:]) {
				return nil, false, &SyntaxError{Offset: start, Msg: "string is not valid UTF-8"}
			}
			p.pos++
			return buf[base:], false, nil
		case c < 0x20:
			return nil, false, p.errorf("control character %#x in string", c)
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		if p.pos+1 >= len(p.data) {
			return nil, false, p.errorf("unexpected end of input in escape")
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
				return nil, false, err
			}
			if r >= 0xD800 && r < 0xDC00 {
				if p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
					return nil, false, p.errorf("lone surrogate \\u%04X", r)
				}
				p.pos += 2
				lo, err := p.hex4()
				if err != nil {
					return nil, false, err
				}
				if lo < 0xDC00 || lo >= 0xE000 {
					return nil, false, p.errorf("invalid surrogate pair \\u%04X\\u%04X", r, lo)
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			} else if r >= 0xDC00 && r < 0xE000 {
				return nil, false, p.errorf("lone surrogate \\u%04X", r)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return nil, false, p.errorf("invalid escape \\%c", esc)
		}
	}
	return nil, false, p.errorf("unexpected end of input in string")
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
func appendString(dst, s []byte) []byte {
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

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// scanRun reports whether run holds no backslash and no control character
// (clean), and whether it is all ASCII. It reads eight bytes at a time:
// for each word, (x - n*ones) &^ x & highs is non-zero exactly when some
// byte of x is below n (n <= 0x80), and a backslash is a zero byte of
// x ^ ('\\'*ones).
func scanRun(run []byte) (clean, ascii bool) {
	var high uint64
	i := 0
	for ; i+8 <= len(run); i += 8 {
		x := binary.LittleEndian.Uint64(run[i:])
		b := x ^ ('\\' * ones)
		if ((x-0x20*ones)&^x|(b-ones)&^b)&highs != 0 {
			return false, false
		}
		high |= x
	}
	for ; i < len(run); i++ {
		c := run[i]
		if c < 0x20 || c == '\\' {
			return false, false
		}
		high |= uint64(c)
	}
	return true, high&highs == 0
}
