package openaitool

import "encoding/json"

// StrictSchema reports whether a tool's input schema can be offered in
// OpenAI's strict mode (Structured Outputs) as it is: an object schema in
// which every object lists all its properties as required and sets
// additionalProperties to false, every array has items of the same kind,
// every value has a type, and no keyword outside the subset strict mode
// accepts appears. A tool built with agenttool.New from a struct of
// required fields qualifies; a wrapped tool's {"type":"object"} does not.
func StrictSchema(schema json.RawMessage) bool {
	var s map[string]any
	if json.Unmarshal(schema, &s) != nil || s["type"] != "object" {
		return false
	}
	return strictNode(s)
}

// strictKeywords are the keywords strictNode accepts; a schema with any
// other is not offered as strict.
var strictKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "description": true, "enum": true, "format": true,
}

func strictNode(s map[string]any) bool {
	for k := range s {
		if !strictKeywords[k] {
			return false
		}
	}
	switch s["type"] {
	case "object":
		props, _ := s["properties"].(map[string]any)
		required, _ := s["required"].([]any)
		if s["additionalProperties"] != false {
			return false
		}
		listed := map[string]bool{}
		for _, r := range required {
			name, _ := r.(string)
			if _, ok := props[name]; !ok {
				return false
			}
			listed[name] = true
		}
		if len(listed) != len(props) {
			return false
		}
		for _, p := range props {
			ps, ok := p.(map[string]any)
			if !ok || !strictNode(ps) {
				return false
			}
		}
		return true
	case "array":
		items, ok := s["items"].(map[string]any)
		return ok && strictNode(items)
	case "string", "integer", "number", "boolean":
		return true
	}
	return false
}
