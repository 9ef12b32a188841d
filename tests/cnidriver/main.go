// cnidriver is a tiny cnitool-like runtime for the real-kernel tests: it drives CNI plugins
// through libcni (go.mod: the newest v1.3.x) exactly as a container runtime would, so the tests
// exercise the same config loading, result conversion, cache handling, STATUS and GC that
// containerd and CRI-O use.
//
//	cnidriver add|check|del <conf-or-conflist> <netns-path> [--ifname net1]
//	          [--container-id ID] [--args 'K=V;K=V'] [--cache-dir DIR]
//	cnidriver status <conf-or-conflist>
//	cnidriver gc <conf-or-conflist> [--valid CONTAINERID/IFNAME,...] [--cache-dir DIR]
//
// Plugins are looked up in CNI_PATH (colon-separated). ADD prints the result JSON on stdout.
// On failure the CNI error (code, msg, details) is printed as JSON on stdout when the plugin
// returned one, a readable message goes to stderr, and the exit status is 1 (2 for usage errors).
//
// What libcni does, and so this driver, that a test must know:
//   - gc first DELs every attachment of the list's network that libcni's cache holds (ADDs
//     through this driver with the same --cache-dir) and --valid does not name, then sends
//     GC with "cni.dev/valid-attachments" (and the misspelt "cni.dev/attachments", CNI issue
//     #1101) to each plugin;
//   - STATUS and GC go only to lists of cniVersion 1.1.0 or newer: for an older list status
//     succeeds without running a plugin, and gc does only the DELs;
//   - results are converted to libcni's types, so extension keys such as the plugin's "roce"
//     object are dropped; tests that read the raw stdout execute the plugin directly
//     (tests/vm/lib.sh: cni_exec).
//
// CNIDRIVER_TIMING=FILE appends "VERB NANOSECONDS" for the libcni call alone (the plugins'
// exec and work, without this driver's own start-up) to FILE; make bench uses it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: cnidriver add|check|del <conf-or-conflist> <netns-path> "+
		"[--ifname NAME] [--container-id ID] [--args 'K=V;K=V'] [--cache-dir DIR]\n"+
		"       cnidriver status <conf-or-conflist>\n"+
		"       cnidriver gc <conf-or-conflist> [--valid CONTAINERID/IFNAME,...] [--cache-dir DIR]")
	os.Exit(2)
}

// loadList accepts both a .conflist and a single-plugin .conf, like cnitool and Multus do.
// From bytes, not NetworkConfFromFile: that would also load plugins from a directory named
// after the network beside the file.
func loadList(path string) (*libcni.NetworkConfigList, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, ok := probe["plugins"]; ok {
		return libcni.NetworkConfFromBytes(raw)
	}
	conf, err := libcni.NetworkPluginConfFromBytes(raw)
	if err != nil {
		return nil, err
	}
	// Deprecated upstream with the .conf format, but it is still how runtimes (containerd's
	// go-cni, Multus) load one, and the tests' configs are mostly .conf files.
	return libcni.ConfListFromConf(conf)
}

func parseArgs(s string) ([][2]string, error) {
	var out [][2]string
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--args: %q is not K=V", kv)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// parseValid reads --valid. Never nil: an empty list is sent as [], which says "nothing is
// valid", where null would be no list at all (the plugin refuses that).
func parseValid(s string) ([]types.GCAttachment, error) {
	out := []types.GCAttachment{}
	for _, a := range strings.Split(s, ",") {
		if a == "" {
			continue
		}
		cid, ifname, ok := strings.Cut(a, "/")
		if !ok {
			return nil, fmt.Errorf("--valid: %q is not CONTAINERID/IFNAME", a)
		}
		out = append(out, types.GCAttachment{ContainerID: cid, IfName: ifname})
	}
	return out, nil
}

func fail(err error) {
	var cniErr *types.Error
	// errors.As looks through libcni's wrapping ("plugin X failed (add): ...") and through
	// GC's errors.Join to the first plugin error.
	if errors.As(err, &cniErr) {
		// Keep the plugin's error machine-readable for the tests (code 104 and friends).
		_ = json.NewEncoder(os.Stdout).Encode(cniErr)
	}
	fmt.Fprintln(os.Stderr, "cnidriver:", err)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 3 {
		usage()
	}
	verb, confPath := os.Args[1], os.Args[2]
	rest := os.Args[3:]
	var netns string
	switch verb {
	case "add", "check", "del":
		if len(rest) < 1 {
			usage()
		}
		netns, rest = rest[0], rest[1:]
	case "status", "gc":
	default:
		usage()
	}

	fs := flag.NewFlagSet("cnidriver", flag.ContinueOnError)
	ifname := fs.String("ifname", "net1", "interface name inside the netns")
	// Default the container ID to the netns name so ADD and DEL pair up without extra flags.
	containerID := fs.String("container-id", "cnidriver-"+filepath.Base(netns), "container ID")
	cniArgs := fs.String("args", "", "CNI_ARGS as 'K=V;K=V'")
	cacheDir := fs.String("cache-dir", "", "libcni result cache (default /var/lib/cni)")
	valid := fs.String("valid", "", "GC: attachments still in use, as CONTAINERID/IFNAME,...")
	if err := fs.Parse(rest); err != nil || fs.NArg() != 0 {
		usage()
	}
	// Each verb takes only its own flags.
	allowed := map[string]bool{"ifname": true, "container-id": true, "args": true, "cache-dir": true}
	switch verb {
	case "status":
		allowed = map[string]bool{}
	case "gc":
		allowed = map[string]bool{"valid": true, "cache-dir": true}
	}
	bad := false
	fs.Visit(func(f *flag.Flag) { bad = bad || !allowed[f.Name] })
	if bad {
		usage()
	}

	list, err := loadList(confPath)
	if err != nil {
		fail(err)
	}
	paths := filepath.SplitList(os.Getenv("CNI_PATH"))
	if len(paths) == 0 {
		fail(errors.New("CNI_PATH is empty: set it to the directory holding the plugins"))
	}
	cni := libcni.NewCNIConfigWithCacheDir(paths, *cacheDir, nil)
	ctx := context.Background()

	var rt *libcni.RuntimeConf
	var gcArgs *libcni.GCArgs
	switch verb {
	case "add", "check", "del":
		args, err := parseArgs(*cniArgs)
		if err != nil {
			fail(err)
		}
		rt = &libcni.RuntimeConf{ContainerID: *containerID, NetNS: netns, IfName: *ifname, Args: args}
	case "gc":
		attachments, err := parseValid(*valid)
		if err != nil {
			fail(err)
		}
		gcArgs = &libcni.GCArgs{ValidAttachments: attachments}
	}

	if path := os.Getenv("CNIDRIVER_TIMING"); path != "" {
		start := time.Now()
		defer func() {
			if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintf(f, "%s %d\n", verb, time.Since(start).Nanoseconds())
				f.Close()
			}
		}()
	}

	switch verb {
	case "add":
		res, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			fail(err)
		}
		if err := res.Print(); err != nil {
			fail(err)
		}
	case "check":
		err = cni.CheckNetworkList(ctx, list, rt)
	case "del":
		err = cni.DelNetworkList(ctx, list, rt)
	case "status":
		err = cni.GetStatusNetworkList(ctx, list)
	case "gc":
		err = cni.GCNetworkList(ctx, list, gcArgs)
	}
	if err != nil {
		fail(err)
	}
}
