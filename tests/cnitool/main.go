// cnitool: tern's libcni test driver.
//
// A small equivalent of the upstream cnitool, built in GOPATH mode against Debian's libcni sources
// (golang-github-appc-cni-dev, libcni 1.1.x) so tests drive plugins through the same library that
// containerd, CRI-O and podman use. See README.md beside this file.
//
// Usage:
//
//	cnitool [flags] add|check|del NETWORK NETNS_PATH
//	cnitool [flags] version NETWORK
//	cnitool [flags] bench NETWORK NETNS_PATH...
//
// NETWORK is a network name looked up in the conf dir, or a path to a .conflist/.conf file.
// Every setting comes from a flag or, when the flag is absent, from its environment variable.
//
// Output: on success, add prints the result JSON; check, del print nothing; version prints
// {"<plugin type>": ["0.1.0", ...], ...}. On failure it prints one JSON object
// {"code": N, "msg": "...", "details": "...", "error": "<libcni's full message>"} on stdout and exits 1.
// code is the plugin's code when the failure came from a plugin (libcni returns *types.Error);
// code 0 means libcni itself failed (config not found, plugin not in CNI_PATH, ...). Usage errors exit 2.
//
// bench times the chain as a runtime calls it, in this one long-lived process: AddNetworkList for
// every NETNS_PATH (container ID bench-<pid>-<i>), -parallel at once, then DelNetworkList for
// each; it prints {"add_ns": [...], "del_ns": [...]}, one duration per pod in nanoseconds.
package main

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// failure is the JSON printed on stdout when a command fails.
type failure struct {
	Code    uint   `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
	Error   string `json:"error"`
}

func fail(err error) {
	f := failure{Msg: err.Error(), Error: err.Error()}
	var te *types.Error
	if errors.As(err, &te) {
		f.Code, f.Msg, f.Details = te.Code, te.Msg, te.Details
	}
	out, _ := json.Marshal(f)
	fmt.Println(string(out))
	os.Exit(1)
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: cnitool [flags] add|check|del NETWORK NETNS_PATH\n       cnitool [flags] version NETWORK\n       cnitool [flags] bench NETWORK NETNS_PATH...\nflags:\n")
	flag.PrintDefaults()
	os.Exit(2)
}

// parseArgs parses CNI_ARGS the way upstream cnitool does: "K=V;K2=V2".
func parseArgs(s string) ([][2]string, error) {
	var out [][2]string
	if s == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ";") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 {
			return nil, fmt.Errorf("invalid CNI_ARGS pair %q", pair)
		}
		out = append(out, [2]string{kv[0], kv[1]})
	}
	return out, nil
}

// loadList loads NETWORK: a file path (.conflist, or a single .conf/.json upconverted) or a name in confDir.
func loadList(confDir, network string) (*libcni.NetworkConfigList, error) {
	if strings.ContainsRune(network, os.PathSeparator) {
		if _, err := os.Stat(network); err == nil {
			if filepath.Ext(network) == ".conflist" {
				return libcni.ConfListFromFile(network)
			}
			conf, err := libcni.ConfFromFile(network)
			if err != nil {
				return nil, err
			}
			return libcni.ConfListFromConf(conf)
		}
	}
	return libcni.LoadConfList(confDir, network)
}

func main() {
	confDir := flag.String("conf-dir", envOr("NETCONFPATH", "/etc/cni/net.d"), "conflist directory (env NETCONFPATH)")
	cniPath := flag.String("cni-path", envOr("CNI_PATH", "/opt/cni/bin"), "plugin search path, ':'-separated (env CNI_PATH)")
	containerID := flag.String("container-id", envOr("CNI_CONTAINERID", ""), "container ID (env CNI_CONTAINERID; default: derived from the netns path as upstream cnitool does)")
	ifName := flag.String("ifname", envOr("CNI_IFNAME", "eth0"), "interface name in the netns (env CNI_IFNAME)")
	cniArgs := flag.String("args", envOr("CNI_ARGS", ""), "CNI_ARGS, K=V;K2=V2 (env CNI_ARGS)")
	capArgs := flag.String("cap-args", envOr("CAP_ARGS", ""), "capability args as a JSON object (env CAP_ARGS)")
	cacheDir := flag.String("cache-dir", envOr("CNI_CACHE_DIR", ""), "libcni result cache dir (env CNI_CACHE_DIR; default /var/lib/cni)")
	parallel := flag.Int("parallel", 1, "bench: pods wired at once")
	flag.Usage = usage
	flag.Parse()

	args := flag.Args()
	if len(args) < 2 {
		usage()
	}
	cmd, network := args[0], args[1]

	list, err := loadList(*confDir, network)
	if err != nil {
		fail(err)
	}
	cninet := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(*cniPath), *cacheDir, nil)
	ctx := context.Background()

	if cmd == "version" {
		if len(args) != 2 {
			usage()
		}
		out := map[string][]string{}
		for _, p := range list.Plugins {
			info, err := cninet.GetVersionInfo(ctx, p.Network.Type)
			if err != nil {
				fail(fmt.Errorf("plugin type=%q version: %w", p.Network.Type, err))
			}
			v := info.SupportedVersions()
			sort.Strings(v)
			out[p.Network.Type] = v
		}
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
		return
	}

	if cmd == "bench" {
		if len(args) < 3 || *parallel < 1 {
			usage()
		}
		bench(ctx, cninet, list, args[2:], *ifName, *parallel)
		return
	}

	if len(args) != 3 {
		usage()
	}
	netns := args[2]

	rt := &libcni.RuntimeConf{ContainerID: *containerID, NetNS: netns, IfName: *ifName}
	if rt.ContainerID == "" {
		rt.ContainerID = fmt.Sprintf("cnitool-%x", sha512.Sum512([]byte(netns)))[:25]
	}
	if rt.Args, err = parseArgs(*cniArgs); err != nil {
		fail(err)
	}
	if *capArgs != "" {
		if err := json.Unmarshal([]byte(*capArgs), &rt.CapabilityArgs); err != nil {
			fail(fmt.Errorf("CAP_ARGS is not a JSON object: %w", err))
		}
	}

	switch cmd {
	case "add":
		result, err := cninet.AddNetworkList(ctx, list, rt)
		if err != nil {
			fail(err)
		}
		if err := result.Print(); err != nil {
			fail(err)
		}
		fmt.Println()
	case "check":
		if err := cninet.CheckNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	case "del":
		if err := cninet.DelNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	default:
		usage()
	}
}

// bench runs ADD for every pod netns, par at once, then DEL for each, and prints the durations.
func bench(ctx context.Context, cninet *libcni.CNIConfig, list *libcni.NetworkConfigList, netns []string, ifName string, par int) {
	rts := make([]*libcni.RuntimeConf, len(netns))
	for i, ns := range netns {
		rts[i] = &libcni.RuntimeConf{ContainerID: fmt.Sprintf("bench-%d-%d", os.Getpid(), i), NetNS: ns, IfName: ifName}
	}
	phase := func(op func(*libcni.RuntimeConf) error) []int64 {
		took := make([]int64, len(rts))
		errs := make([]error, len(rts))
		next := make(chan int)
		var wg sync.WaitGroup
		for w := 0; w < par; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					t := time.Now()
					errs[i] = op(rts[i])
					took[i] = time.Since(t).Nanoseconds()
				}
			}()
		}
		for i := range rts {
			next <- i
		}
		close(next)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				fail(err)
			}
		}
		return took
	}
	add := phase(func(rt *libcni.RuntimeConf) error {
		_, err := cninet.AddNetworkList(ctx, list, rt)
		return err
	})
	del := phase(func(rt *libcni.RuntimeConf) error { return cninet.DelNetworkList(ctx, list, rt) })
	b, _ := json.Marshal(map[string][]int64{"add_ns": add, "del_ns": del})
	fmt.Println(string(b))
}
