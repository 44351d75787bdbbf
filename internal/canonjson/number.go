package canonjson

import (
	"strconv"
	"strings"
)

// maxExponentDigits bounds the exponent of a number literal, so that a
// hostile "1e999999999999" is refused instead of being expanded.
const maxExponentDigits = 9

// MaxMagnitude bounds the decimal magnitude of a number: its value lies
// within 1e±MaxMagnitude (or is 0). Far beyond any quantity a tool takes,
// it keeps a 9-byte literal from making a tool's decoded value (a
// big.Float, a decimal type) cost seconds to print when the key follows it.
const MaxMagnitude = 10000

// number parses a JSON number and appends its canonical form to buf.
//
// Numbers are compared by exact decimal value, never through float64: 1, 1.0,
// 10e-1 and 0.1e1 are one number, and 9007199254740993 stays itself. The form
// written is the shortest of
//
//	integer digits      when the value is an integer below 10^21
//	d.ddd or 0.000ddd   when it has a fraction and no more than 6 leading zeros
//	d.ddde±n            otherwise
//
// with no leading '+', no trailing fraction zeros and "0" for negative zero.
func (p *parser) number() error {
	start := p.pos
	neg := false
	if p.data[p.pos] == '-' {
		neg = true
		p.pos++
	}
	intStart := p.pos
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
	case p.pos < len(p.data) && p.data[p.pos] >= '1' && p.data[p.pos] <= '9':
		p.skipDigits()
	default:
		return p.errorf("invalid number")
	}
	intPart := string(p.data[intStart:p.pos])
	var fracPart string
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		fs := p.pos
		p.skipDigits()
		if p.pos == fs {
			return p.errorf("number needs digits after '.'")
		}
		fracPart = string(p.data[fs:p.pos])
	}
	var exp int64
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		expNeg := false
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			expNeg = p.data[p.pos] == '-'
			p.pos++
		}
		es := p.pos
		p.skipDigits()
		if p.pos == es {
			return p.errorf("number needs digits in its exponent")
		}
		digits := strings.TrimLeft(string(p.data[es:p.pos]), "0")
		if len(digits) > maxExponentDigits {
			return &SyntaxError{Offset: start, Msg: "number exponent out of range"}
		}
		if digits != "" {
			exp, _ = strconv.ParseInt(digits, 10, 64)
		}
		if expNeg {
			exp = -exp
		}
	}

	digits := strings.TrimLeft(intPart+fracPart, "0")
	if digits == "" {
		p.buf = append(p.buf, '0')
		return nil
	}
	e10 := exp - int64(len(fracPart))
	trimmed := strings.TrimRight(digits, "0")
	e10 += int64(len(digits) - len(trimmed))
	digits = trimmed

	if neg {
		p.buf = append(p.buf, '-')
	}
	n := int64(len(digits))
	point := n + e10 // digits before the decimal point
	if point > MaxMagnitude || point < -MaxMagnitude {
		return &SyntaxError{Offset: start, Msg: "number out of range: beyond 1e±10000"}
	}
	switch {
	case e10 >= 0 && point <= 21:
		p.buf = append(p.buf, digits...)
		for range e10 {
			p.buf = append(p.buf, '0')
		}
	case e10 < 0 && point > 0:
		p.buf = append(p.buf, digits[:point]...)
		p.buf = append(p.buf, '.')
		p.buf = append(p.buf, digits[point:]...)
	case e10 < 0 && point > -6:
		p.buf = append(p.buf, '0', '.')
		for range -point {
			p.buf = append(p.buf, '0')
		}
		p.buf = append(p.buf, digits...)
	default:
		p.buf = append(p.buf, digits[0])
		if n > 1 {
			p.buf = append(p.buf, '.')
			p.buf = append(p.buf, digits[1:]...)
		}
		p.buf = append(p.buf, 'e')
		p.buf = strconv.AppendInt(p.buf, point-1, 10)
	}
	return nil
}

func (p *parser) skipDigits() {
	for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
		p.pos++
	}
}
