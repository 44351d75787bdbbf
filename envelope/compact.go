package envelope

import (
	"encoding/json"
	"strings"
)

// compactor checks a JSON value the way encoding/json.Valid does and, when
// it writes, appends it without insignificant space, as json.Compact does.
// It is one pass over the value, where Valid and Compact are one each, and
// several times faster than either on the small results of tool calls.
type compactor[T string | []byte] struct {
	src   T
	pos   int
	dst   []byte
	write bool
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// validJSON reports whether src is one valid JSON value, as json.Valid does.
func validJSON[T string | []byte](src T) bool {
	c := compactor[T]{src: src}
	return c.run()
}

// appendCompact appends src, one JSON value, to dst without insignificant
// space, or returns dst and false if src is not valid JSON.
func appendCompact[T string | []byte](dst []byte, src T) ([]byte, bool) {
	c := compactor[T]{src: src, dst: dst, write: true}
	if !c.run() {
		return dst, false
	}
	return c.dst, true
}

func (c *compactor[T]) run() bool {
	c.space()
	if !c.value(0) {
		return false
	}
	c.space()
	return c.pos == len(c.src)
}

func (c *compactor[T]) space() {
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// emit appends src[from:c.pos].
func (c *compactor[T]) emit(from int) {
	if c.write {
		c.dst = append(c.dst, c.src[from:c.pos]...)
	}
}

func (c *compactor[T]) byte(b byte) {
	if c.write {
		c.dst = append(c.dst, b)
	}
}

func (c *compactor[T]) value(depth int) bool {
	if c.pos >= len(c.src) {
		return false
	}
	switch b := c.src[c.pos]; {
	case b == '{':
		return c.container(depth+1, true, '}')
	case b == '[':
		return c.container(depth+1, false, ']')
	case b == '"':
		return c.string()
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	}
	return false
}

// container checks an object (named members, closing '}') or an array
// (closing ']') at its opening byte.
func (c *compactor[T]) container(depth int, named bool, closing byte) bool {
	if depth > maxDepth {
		return false
	}
	c.byte(c.src[c.pos])
	c.pos++
	c.space()
	if c.pos < len(c.src) && c.src[c.pos] == closing {
		c.pos++
		c.byte(closing)
		return true
	}
	for {
		if named {
			if c.pos >= len(c.src) || c.src[c.pos] != '"' || !c.string() {
				return false
			}
			c.space()
			if c.pos >= len(c.src) || c.src[c.pos] != ':' {
				return false
			}
			c.pos++
			c.byte(':')
			c.space()
		}
		if !c.value(depth) {
			return false
		}
		c.space()
		if c.pos >= len(c.src) {
			return false
		}
		switch c.src[c.pos] {
		case ',':
			c.pos++
			c.byte(',')
			c.space()
		case closing:
			c.pos++
			c.byte(closing)
			return true
		default:
			return false
		}
	}
}

// string checks a string at '"'. Like encoding/json, it accepts any byte
// from 0x20 up, invalid UTF-8 included, and copies it as it is.
func (c *compactor[T]) string() bool {
	from := c.pos
	c.pos++
	for c.pos < len(c.src) {
		b := c.src[c.pos]
		switch {
		case b == '"':
			c.pos++
			c.emit(from)
			return true
		case b == '\\':
			if c.pos+1 >= len(c.src) {
				return false
			}
			switch c.src[c.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				c.pos += 2
			case 'u':
				if c.pos+6 > len(c.src) {
					return false
				}
				for i := c.pos + 2; i < c.pos+6; i++ {
					if !isHex(c.src[i]) {
						return false
					}
				}
				c.pos += 6
			default:
				return false
			}
		case b < 0x20:
			return false
		default:
			c.pos++
		}
	}
	return false
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

func (c *compactor[T]) digits() int {
	n := 0
	for c.pos < len(c.src) && c.src[c.pos] >= '0' && c.src[c.pos] <= '9' {
		c.pos++
		n++
	}
	return n
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (c *compactor[T]) number() bool {
	from := c.pos
	if c.src[c.pos] == '-' {
		c.pos++
	}
	switch {
	case c.pos >= len(c.src):
		return false
	case c.src[c.pos] == '0':
		c.pos++
	case c.digits() == 0:
		return false
	}
	if c.pos < len(c.src) && c.src[c.pos] == '.' {
		c.pos++
		if c.digits() == 0 {
			return false
		}
	}
	if c.pos < len(c.src) && (c.src[c.pos] == 'e' || c.src[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.src) && (c.src[c.pos] == '+' || c.src[c.pos] == '-') {
			c.pos++
		}
		if c.digits() == 0 {
			return false
		}
	}
	c.emit(from)
	return true
}

func (c *compactor[T]) literal(word string) bool {
	if len(c.src)-c.pos < len(word) || string(c.src[c.pos:c.pos+len(word)]) != word {
		return false
	}
	c.pos += len(word)
	if c.write {
		c.dst = append(c.dst, word...)
	}
	return true
}

// ResultFromText makes a tool's text output an envelope result: the output
// itself, without insignificant space, if it is one JSON value, or else the
// output as a JSON string. Surrounding space is ignored in the first case.
func ResultFromText(output string) json.RawMessage {
	trimmed := strings.TrimSpace(output)
	if b, ok := appendCompact(make([]byte, 0, len(trimmed)), trimmed); ok {
		return b
	}
	return appendString(make([]byte, 0, len(output)+2), output)
}
