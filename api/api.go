// Package api holds Stampede's HTTP API contract: the OpenAPI 3.1 document
// openapi.yaml, embedded in the binary. The gateway serves it at
// GET /api/openapi.yaml and its tests validate every request and response
// they send against it. It is a leaf: it imports no Stampede package.
package api

import _ "embed"

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document (YAML). The slice is shared:
// callers must not modify it.
func OpenAPI() []byte { return openAPI }
