//go:build tools

// Package peers pins istio-cni's plugin (istio.io/istio/cni/cmd/istio-cni,
// sidecar mode) for scripts/peers.sh, which builds it as a binary for the
// side-by-side tests. None of its code enters meshnft.
package peers

import _ "istio.io/istio/cni/cmd/istio-cni"
