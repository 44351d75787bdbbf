package agenttool

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// schemaFor derives a JSON Schema for the input type of a typed tool. It
// covers what tool inputs are made of: structs, strings, numbers, booleans,
// slices, maps with string keys, pointers and time.Time.
func schemaFor(t reflect.Type) (json.RawMessage, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("input type %v is not a struct", t)
	}
	s, err := schemaOf(t, map[reflect.Type]bool{})
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

func schemaOf(t reflect.Type, seen map[reflect.Type]bool) (map[string]any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == timeType {
		return map[string]any{"type": "string", "format": "date-time"}, nil
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.Slice, reflect.Array:
		items, err := schemaOf(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "array", "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key type %v is not a string", t.Key())
		}
		values, err := schemaOf(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "additionalProperties": values}, nil
	case reflect.Interface:
		return map[string]any{}, nil
	case reflect.Struct:
		if seen[t] {
			return nil, fmt.Errorf("type %v refers to itself", t)
		}
		seen[t] = true
		defer delete(seen, t)
		props := map[string]any{}
		required := []string{}
		fields, err := structFields(t)
		if err != nil {
			return nil, err
		}
		for _, f := range fields {
			ps, err := schemaOf(f.typ, seen)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.goName, err)
			}
			if f.desc != "" {
				ps["description"] = f.desc
			}
			props[f.name] = ps
			if f.required {
				required = append(required, f.name)
			}
		}
		return map[string]any{
			"type": "object", "properties": props, "required": required, "additionalProperties": false,
		}, nil
	}
	return nil, fmt.Errorf("type %v cannot be described in JSON Schema", t)
}
