// Command linkerd-await is a stand-in, for meshnft's tests only, for the
// program of that name in Linkerd's proxy image (github.com/linkerd/linkerd-await,
// v0.3.3 in linkerd2's Dockerfile.proxy), whose source is not among the snapshots
// in ../shared/peers. The injector runs it as the proxy container's postStart hook
// in the classic layout (`linkerd-await --timeout=2m --port=4191`): kubelet starts
// the next container only when it has exited 0. It does what that hook needs, and
// nothing more: it asks the proxy's admin server for GET /ready on localhost:PORT
// every BACKOFF until the answer is 200, and exits 0 then; when TIMEOUT elapses
// first, it says so on stderr and exits 69 (EX_UNAVAILABLE). Running a command
// after readiness (linkerd-await's CMD and --shutdown) is not implemented: the
// injector's hook never asks for it.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	port := flag.Uint("port", 4191, "the port of the local proxy's admin server")
	flag.UintVar(port, "p", 4191, "short for --port")
	backoff := flag.Duration("backoff", time.Second, "time to wait after a failed readiness check")
	flag.DurationVar(backoff, "b", time.Second, "short for --backoff")
	timeout := flag.Duration("timeout", 0, "fail when the proxy is not ready after this long (0: wait for ever)")
	flag.DurationVar(timeout, "t", 0, "short for --timeout")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "linkerd-await (meshnft's stand-in): running a command after readiness is not implemented")
		os.Exit(64)
	}
	url := fmt.Sprintf("http://localhost:%d/ready", *port)
	client := &http.Client{Timeout: 2 * time.Second}
	var deadline time.Time
	if *timeout > 0 {
		deadline = time.Now().Add(*timeout)
	}
	for {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if !deadline.IsZero() && time.Now().Add(*backoff).After(deadline) {
			fmt.Fprintf(os.Stderr, "linkerd-proxy failed to become ready within %v timeout\n", *timeout)
			os.Exit(69)
		}
		time.Sleep(*backoff)
	}
}
