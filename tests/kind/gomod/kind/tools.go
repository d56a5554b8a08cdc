//go:build tools

// Package tools names the command this wrapper module builds.
package tools

import _ "sigs.k8s.io/kind"
