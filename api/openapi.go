package api

import _ "embed" // for openapi.yaml

//go:embed openapi.yaml
var openapi string

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API, which the
// server serves at GET /v1/openapi.yaml.
func OpenAPI() string { return openapi }
