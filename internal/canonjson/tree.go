package canonjson

import (
	"encoding/json"
)

// Decode reads canonical JSON (as [Canonical] writes it) into the values
// encoding/json produces with UseNumber: map[string]any, []any, string,
// json.Number, bool and nil. It is several times quicker than encoding/json,
// because canonical form has no insignificant space, no duplicate names and
// numbers already checked. Input that is not in canonical form may be
// refused.
func Decode(canonical []byte) (any, error) {
	return decode(parser{data: canonical})
}

// DecodeShared is [Decode] for a caller that holds the canonical form as a
// string as well: text must be string(canonical). The decoded strings and
// member names that had no escapes are substrings of text, so that
// decoding copies none of them.
func DecodeShared(canonical []byte, text string) (any, error) {
	if len(text) != len(canonical) {
		panic("canonjson: DecodeShared: the text is not the canonical form")
	}
	return decode(parser{data: canonical, shared: text})
}

func decode(p parser) (any, error) {
	var scratch []byte
	v, err := p.tree(&scratch, 0)
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.data) {
		return nil, p.errorf("unexpected data after the JSON value")
	}
	return v, nil
}

func (p *parser) tree(scratch *[]byte, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, p.errorf("nesting deeper than %d", MaxDepth)
	}
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		p.pos++
		m := map[string]any{}
		if p.pos < len(p.data) && p.data[p.pos] == '}' {
			p.pos++
			return m, nil
		}
		for {
			if p.pos >= len(p.data) || p.data[p.pos] != '"' {
				return nil, p.errorf("expected a member name")
			}
			name, raw, err := p.string(scratch)
			if err != nil {
				return nil, err
			}
			key := p.text(name, raw)
			if p.pos >= len(p.data) || p.data[p.pos] != ':' {
				return nil, p.errorf("expected ':'")
			}
			p.pos++
			v, err := p.tree(scratch, depth+1)
			if err != nil {
				return nil, err
			}
			m[key] = v
			if p.pos < len(p.data) && p.data[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.pos < len(p.data) && p.data[p.pos] == '}' {
				p.pos++
				return m, nil
			}
			return nil, p.errorf("expected ',' or '}'")
		}
	case c == '[':
		p.pos++
		a := []any{}
		if p.pos < len(p.data) && p.data[p.pos] == ']' {
			p.pos++
			return a, nil
		}
		for {
			v, err := p.tree(scratch, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			if p.pos < len(p.data) && p.data[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.pos < len(p.data) && p.data[p.pos] == ']' {
				p.pos++
				return a, nil
			}
			return nil, p.errorf("expected ',' or ']'")
		}
	case c == '"':
		s, raw, err := p.string(scratch)
		if err != nil {
			return nil, err
		}
		return p.text(s, raw), nil
	case c == 't', c == 'f', c == 'n':
		for _, lit := range [...]struct {
			word string
			v    any
		}{{"true", true}, {"false", false}, {"null", nil}} {
			if len(p.data)-p.pos >= len(lit.word) && string(p.data[p.pos:p.pos+len(lit.word)]) == lit.word {
				p.pos += len(lit.word)
				return lit.v, nil
			}
		}
		return nil, p.errorf("invalid literal")
	case c == '-' || c >= '0' && c <= '9':
		start := p.pos
		for p.pos < len(p.data) {
			c := p.data[p.pos]
			if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
				break
			}
			p.pos++
		}
		return json.Number(p.data[start:p.pos]), nil
	}
	return nil, p.errorf("unexpected character %q", p.data[p.pos])
}

// text returns s, which p.string has just returned, as a string: a
// substring of p.shared if s had no escapes and there is one, a copy
// otherwise.
func (p *parser) text(s []byte, raw bool) string {
	if raw && p.shared != "" {
		end := p.pos - 1 // the closing quote
		return p.shared[end-len(s) : end]
	}
	return string(s)
}
