package envelope

import _ "embed"

// Schema is the JSON Schema (draft 2020-12) of the envelope's JSON form.
//
//go:embed envelope.schema.json
var Schema []byte
