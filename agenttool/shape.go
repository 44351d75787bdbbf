package agenttool

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe/internal/canonjson"
)

// A shape is what a typed tool's input type accepts, derived once from the
// type. Model input is checked against it before it is decoded, because
// encoding/json is lenient where a key must not be: it matches member names
// case-insensitively (with Unicode folding: "ſubject" fills Subject), and
// reads null as "leave the field alone". Two inputs that the tool could not
// tell apart must not get two keys; two inputs it can tell apart must not
// be read as one. So member names must be exactly the type's JSON names,
// null is accepted only where the field can hold it (a pointer or an
// interface), and required fields must say something.
type shape struct {
	kind   shapeKind
	elem   *shape            // array items, map values
	fields map[string]*field // struct fields by JSON name
	names  []string          // struct fields' JSON names, in declaration order
	// self: a type that decodes and encodes itself (a big.Float, a decimal
	// type); the key follows its value encoded again, at a cost it alone
	// knows.
	self bool
	// loose and skel are the loose forms and skeletons of names, for near;
	// computed when the shape is built, read by concurrent calls.
	loose, skel []string
}

type shapeKind uint8

const (
	shapeAny shapeKind = iota // anything: interfaces and types that decode themselves
	shapeString
	shapeNumber
	shapeBool
	shapeArray
	shapeMap
	shapeStruct
)

// field is one field of a struct shape.
type field struct {
	name     string // the JSON name
	goName   string
	shape    *shape
	nullable bool // a pointer or an interface: null is a value it holds
	required bool // no omitempty or omitzero, not a pointer or interface: present and not empty
	exact    bool // tagged retrysafe:"exact": compared exactly in keys
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	timeType        = reflect.TypeFor[time.Time]()
)

// implements reports whether t or *t implements iface.
func implements(t, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

// shapeOf derives the shape of t, a struct or a pointer to one.
func shapeOf(t reflect.Type) (*shape, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("input type %v is not a struct", t)
	}
	return buildShape(t, map[reflect.Type]bool{})
}

func buildShape(t reflect.Type, seen map[reflect.Type]bool) (*shape, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return &shape{kind: shapeString}, nil
	case implements(t, jsonUnmarshaler) || implements(t, textUnmarshaler):
		// The key follows the value re-encoded: a type that reads itself
		// must write itself too, or two values could encode alike.
		if !implements(t, jsonMarshaler) && !implements(t, textMarshaler) {
			return nil, fmt.Errorf("type %v decodes itself (UnmarshalJSON or UnmarshalText) but does not encode itself: "+
				"add MarshalJSON or MarshalText, so that the key can tell its values apart", t)
		}
		return &shape{kind: shapeAny, self: true}, nil
	}
	switch t.Kind() {
	case reflect.String:
		return &shape{kind: shapeString}, nil
	case reflect.Bool:
		return &shape{kind: shapeBool}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return &shape{kind: shapeNumber}, nil
	case reflect.Interface:
		return &shape{kind: shapeAny}, nil
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return &shape{kind: shapeString}, nil // []byte is base64 text
		}
		elem, err := buildShape(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return &shape{kind: shapeArray, elem: elem}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key type %v is not a string", t.Key())
		}
		elem, err := buildShape(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return &shape{kind: shapeMap, elem: elem}, nil
	case reflect.Struct:
		if seen[t] {
			return nil, fmt.Errorf("type %v refers to itself", t)
		}
		seen[t] = true
		defer delete(seen, t)
		fs, err := structFields(t)
		if err != nil {
			return nil, err
		}
		s := &shape{kind: shapeStruct, fields: make(map[string]*field, len(fs))}
		for _, f := range fs {
			fs, err := buildShape(f.typ, seen)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.goName, err)
			}
			if f.quoted {
				fs = &shape{kind: shapeAny}
			}
			k := f.typ.Kind()
			s.fields[f.name] = &field{
				name: f.name, goName: f.goName, shape: fs, required: f.required, exact: f.exact,
				nullable: k == reflect.Pointer || k == reflect.Interface,
			}
			s.names = append(s.names, f.name)
			s.loose = append(s.loose, looseString(f.name))
			s.skel = append(s.skel, skeleton(f.name))
		}
		return s, nil
	}
	return nil, fmt.Errorf("type %v cannot be described in JSON", t)
}

// structField is a field as encoding/json sees it.
type structField struct {
	name, goName string
	desc         string
	typ          reflect.Type
	required     bool
	exact        bool
	quoted       bool // the ",string" option: a number or boolean written as a string
}

// structFields lists the JSON fields of struct type t the way encoding/json
// reads them: exported fields by their json names, fields of untagged
// embedded structs promoted. Two fields with one JSON name are an error:
// encoding/json would silently drop both.
func structFields(t reflect.Type) ([]structField, error) {
	var out []structField
	seen := map[string]string{}
	var walk func(t reflect.Type) error
	walk = func(t reflect.Type) error {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if tag == "-" {
				continue
			}
			if f.Anonymous && name == "" {
				et := f.Type
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					if err := walk(et); err != nil {
						return err
					}
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if other, dup := seen[name]; dup {
				return fmt.Errorf("fields %s and %s both have the JSON name %q", other, f.Name, name)
			}
			seen[name] = f.Name
			o := strings.Split(opts, ",")
			// A pointer or an interface says "may be absent", as omitempty
			// does; anything else is required.
			k := f.Type.Kind()
			out = append(out, structField{
				name: name, goName: f.Name, desc: f.Tag.Get("desc"), typ: f.Type,
				required: !slices.Contains(o, "omitempty") && !slices.Contains(o, "omitzero") && k != reflect.Pointer && k != reflect.Interface,
				exact:    slices.Contains(strings.Split(f.Tag.Get("retrysafe"), ","), "exact"),
				quoted:   slices.Contains(o, "string"),
			})
		}
		return nil
	}
	return out, walk(t)
}

// inputError says what is wrong with model input, in words the model can act
// on.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

func badInput(format string, args ...any) error {
	return &inputError{fmt.Sprintf(format, args...)}
}

// check reports the first way v, decoded with UseNumber, does not fit s.
// path names v for the message ("" for the whole input).
func (s *shape) check(path string, v any, names *looseNames) error {
	at := func() string {
		if path == "" {
			return "the input"
		}
		return fmt.Sprintf("field %q", path)
	}
	switch s.kind {
	case shapeAny:
		if s.self {
			return checkMagnitude(at(), v)
		}
		return nil
	case shapeString:
		if _, ok := v.(string); !ok {
			return badInput("%s must be a string, not %s", at(), jsonKind(v))
		}
	case shapeNumber:
		if _, ok := v.(json.Number); !ok {
			return badInput("%s must be a number, not %s", at(), jsonKind(v))
		}
	case shapeBool:
		if _, ok := v.(bool); !ok {
			return badInput("%s must be true or false, not %s", at(), jsonKind(v))
		}
	case shapeArray:
		items, ok := v.([]any)
		if !ok {
			return badInput("%s must be an array, not %s", at(), jsonKind(v))
		}
		for i, item := range items {
			p := fmt.Sprintf("%s[%d]", path, i)
			if item == nil && s.elem.kind != shapeAny {
				return badInput("field %q is null; leave out what you do not know", p)
			}
			if err := s.elem.check(p, item, names); err != nil {
				return err
			}
		}
	case shapeMap:
		m, ok := v.(map[string]any)
		if !ok {
			return badInput("%s must be an object, not %s", at(), jsonKind(v))
		}
		for _, name := range sortedNames(m) {
			p := join(path, name)
			if m[name] == nil && s.elem.kind != shapeAny {
				return badInput("field %q is null; leave out what you do not know", p)
			}
			if err := s.elem.check(p, m[name], names); err != nil {
				return err
			}
		}
	case shapeStruct:
		m, ok := v.(map[string]any)
		if !ok {
			return badInput("%s must be an object with the fields %s, not %s", at(), s.list(), jsonKind(v))
		}
		for _, name := range sortedNames(m) {
			f := s.fields[name]
			p := join(path, name)
			if f == nil {
				if want := s.near(name, names); want != "" {
					return badInput("unknown field %q: the field is called %q, exactly", clip(p), join(path, want))
				}
				return badInput("unknown field %q: the fields are %s", clip(p), s.list())
			}
			val := m[name]
			if val == nil && !f.nullable {
				if f.required {
					return badInput("field %q is null; it is required: give its value", p)
				}
				return badInput("field %q is null; leave it out, or give its value", p)
			}
			if val == nil {
				continue
			}
			if err := f.shape.check(p, val, names); err != nil {
				return err
			}
		}
		for _, name := range s.names {
			if f := s.fields[name]; f.required && isEmpty(m[name]) {
				if _, present := m[name]; !present {
					return badInput("missing required field %q", join(path, name))
				}
				return badInput("required field %q is empty", join(path, name))
			}
		}
	}
	return nil
}

// dropNulls removes, at every depth, the members of v that are struct
// fields with a null value, and reports whether it removed any. Map entries
// and array items are kept: a tool can tell a null entry from a missing one.
func (s *shape) dropNulls(v any) bool {
	changed := false
	switch s.kind {
	case shapeStruct:
		m, _ := v.(map[string]any)
		for name, val := range m {
			if val == nil {
				delete(m, name)
				changed = true
			} else if f := s.fields[name]; f != nil {
				changed = f.shape.dropNulls(val) || changed
			}
		}
	case shapeArray:
		items, _ := v.([]any)
		for _, item := range items {
			changed = s.elem.dropNulls(item) || changed
		}
	case shapeMap:
		m, _ := v.(map[string]any)
		for _, val := range m {
			changed = s.elem.dropNulls(val) || changed
		}
	}
	return changed
}

// near returns the field whose name the model may have meant by name: the
// same loose form, or the same skeleton, or "". The fields' forms are
// computed when the shape is built, and name's once per call (names keeps
// them; nil computes them).
func (s *shape) near(name string, names *looseNames) string {
	l, sk := names.of(name), names.skeletonOf(name)
	for i, n := range s.names {
		if s.loose[i] == l || s.skel[i] == sk {
			return n
		}
	}
	return ""
}

// clip shortens a name the model sent, for a message that quotes it back.
func clip(name string) string {
	const most = 64
	if utf8.RuneCountInString(name) <= most {
		return name
	}
	n := 0
	for i := range name {
		if n == most {
			return name[:i] + "…"
		}
		n++
	}
	return name
}

// checkMagnitude refuses a value for a type that decodes itself whose
// text is a number in exponent form beyond 1e±canonjson.MaxMagnitude
// ("1e1000000", "0x1p4000000"): a few bytes that such a type (big.Float)
// would spend seconds and megabytes printing again, when the key follows
// it.
func checkMagnitude(at string, v any) error {
	str, ok := v.(string)
	if !ok {
		return nil // numbers were bounded when the input was read
	}
	i := strings.LastIndexAny(str, "eEpP")
	if i < 0 || i == len(str)-1 {
		return nil
	}
	exp := strings.TrimLeft(str[i+1:], "+-")
	if exp == "" || strings.TrimLeft(exp, "0123456789") != "" {
		return nil
	}
	exp = strings.TrimLeft(exp, "0")
	if len(exp) > 5 || (len(exp) == 5 && exp > "10000") {
		return badInput("%s is a number beyond 1e±%d; give it in a smaller form", at, canonjson.MaxMagnitude)
	}
	return nil
}

func (s *shape) list() string {
	q := make([]string, len(s.names))
	for i, n := range s.names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func sortedNames(m map[string]any) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
