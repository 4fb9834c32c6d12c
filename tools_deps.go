//go:build tools

// Package airlock_test pins the modules that later packages build on
// (exports, the MCP server) in go.mod; it is never compiled.
package airlock_test

import (
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "k8s.io/api/apps/v1"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/api/networking/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "sigs.k8s.io/yaml"
)
