// Command cnidriver runs a CNI network configuration list (conflist) through
// the CNI project's own libcni, the library container runtimes use, so tests
// exercise a plugin chain exactly as a runtime would.
//
// Build (offline, Debian packages golang-go + golang-github-appc-cni-dev):
//
//	GOPATH=/usr/share/gocode GO111MODULE=off go build -o OUT ./tests/cnidriver
//
// Usage:
//
//	cnidriver add|del|check --conflist FILE --netns PATH --id CONTAINERID
//	    [--ifname eth0] [--arg K=V]... --cache-dir DIR --bin-dir DIR [--bin-dir DIR]...
//	    [--typed]
//	cnidriver load --conflist FILE
//
// Runtime args always start with IgnoreUnknown=1 (as kubelet passes), then the
// --arg pairs in order.
//
// add prints the chain's final result on stdout: by default the exact bytes the
// last plugin of the chain wrote (captured by a wrapping invoke.Exec); with
// --typed, libcni's parsed result converted to the conflist's cniVersion.
// del and check print nothing on success. load only parses the file with
// libcni (ConfListFromFile, as runtimes load a .conflist) and prints
// {"name":..,"cniVersion":..,"plugins":["<type>",...]}.
//
// On failure the exit code is 1 and the LAST line of stderr is one JSON object
// {"code":N,"msg":"...","details":"...","error":"<full wrapped error text>"};
// code/msg/details come from the *types.Error in the error chain if there is
// one (code 0 otherwise). Plugin stderr output, if any, precedes that line.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// recordingExec wraps libcni's default exec and remembers the raw stdout of the
// most recent ADD invocation, i.e. the last plugin's result in the chain.
type recordingExec struct {
	invoke.DefaultExec
	mu      sync.Mutex
	lastAdd []byte
}

func (e *recordingExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	out, err := e.DefaultExec.ExecPlugin(ctx, pluginPath, stdinData, environ)
	if err == nil {
		for _, kv := range environ {
			if kv == "CNI_COMMAND=ADD" {
				e.mu.Lock()
				e.lastAdd = append([]byte(nil), out...)
				e.mu.Unlock()
				break
			}
		}
	}
	return out, err
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type errorOut struct {
	Code    uint   `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
	Error   string `json:"error"`
}

func fail(err error) {
	out := errorOut{Msg: err.Error(), Error: err.Error()}
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		out.Code = cniErr.Code
		out.Msg = cniErr.Msg
		out.Details = cniErr.Details
	}
	b, _ := json.Marshal(out)
	fmt.Fprintf(os.Stderr, "%s\n", b)
	os.Exit(1)
}

func usage(msg string) {
	fmt.Fprintf(os.Stderr, "cnidriver: %s\nusage: cnidriver load --conflist FILE | cnidriver add|del|check --conflist FILE --netns PATH --id ID [--ifname eth0] [--arg K=V]... --cache-dir DIR --bin-dir DIR [--bin-dir DIR]... [--typed]\n", msg)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage("missing command")
	}
	cmd := os.Args[1]
	if cmd == "load" {
		if len(os.Args) != 4 || os.Args[2] != "--conflist" {
			usage("load needs exactly --conflist FILE")
		}
		list, err := libcni.ConfListFromFile(os.Args[3])
		if err != nil {
			fail(err)
		}
		types := []string{}
		for _, p := range list.Plugins {
			types = append(types, p.Network.Type)
		}
		b, _ := json.Marshal(map[string]interface{}{"name": list.Name, "cniVersion": list.CNIVersion, "plugins": types})
		fmt.Printf("%s\n", b)
		return
	}
	if cmd != "add" && cmd != "del" && cmd != "check" {
		usage(fmt.Sprintf("unknown command %q", cmd))
	}
	var conflist, netns, id, cacheDir string
	ifname := "eth0"
	typed := false
	var args, binDirs multiFlag
	rest := os.Args[2:]
	for i := 0; i < len(rest); i++ {
		flag := rest[i]
		if flag == "--typed" {
			typed = true
			continue
		}
		if i+1 >= len(rest) {
			usage(fmt.Sprintf("flag %s needs a value", flag))
		}
		val := rest[i+1]
		i++
		switch flag {
		case "--conflist":
			conflist = val
		case "--netns":
			netns = val
		case "--id":
			id = val
		case "--ifname":
			ifname = val
		case "--cache-dir":
			cacheDir = val
		case "--arg":
			_ = args.Set(val)
		case "--bin-dir":
			_ = binDirs.Set(val)
		default:
			usage(fmt.Sprintf("unknown flag %s", flag))
		}
	}
	if conflist == "" || netns == "" || id == "" || cacheDir == "" || len(binDirs) == 0 {
		usage("--conflist, --netns, --id, --cache-dir and --bin-dir are required")
	}

	list, err := libcni.ConfListFromFile(conflist)
	if err != nil {
		fail(err)
	}

	rtArgs := [][2]string{{"IgnoreUnknown", "1"}}
	for _, kv := range args {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			usage(fmt.Sprintf("--arg %q is not K=V", kv))
		}
		rtArgs = append(rtArgs, [2]string{k, v})
	}
	rt := &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       netns,
		IfName:      ifname,
		Args:        rtArgs,
	}

	exec := &recordingExec{DefaultExec: invoke.DefaultExec{
		RawExec:       &invoke.RawExec{Stderr: os.Stderr},
		PluginDecoder: version.PluginDecoder{},
	}}
	cni := libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, exec)
	ctx := context.Background()

	switch cmd {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			fail(err)
		}
		if typed {
			conv, err := result.GetAsVersion(list.CNIVersion)
			if err != nil {
				fail(err)
			}
			b, err := json.Marshal(conv)
			if err != nil {
				fail(err)
			}
			fmt.Printf("%s\n", b)
		} else {
			exec.mu.Lock()
			raw := exec.lastAdd
			exec.mu.Unlock()
			os.Stdout.Write(raw)
			if len(raw) == 0 || raw[len(raw)-1] != '\n' {
				fmt.Println()
			}
		}
	case "del":
		if err := cni.DelNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	case "check":
		if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	}
}
