//go:build tools

// Package tools names the command this wrapper module builds.
package tools

import _ "github.com/opencontainers/runc"
