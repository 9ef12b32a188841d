// cnidriver is a tiny cnitool-like runtime for the real-kernel tests: it drives CNI plugins
// through Debian's libcni (1.1.2) exactly as a container runtime would, so the tests exercise the
// same config loading, result conversion and cache handling that containerd and CRI-O use.
//
//	cnidriver add|check|del <conf-or-conflist> <netns-path> [--ifname net1]
//	          [--container-id ID] [--args 'K=V;K=V'] [--cache-dir DIR]
//	cnidriver status <conf-or-conflist>
//	cnidriver gc <conf-or-conflist> [--valid CONTAINERID/IFNAME,...]
//
// Plugins are looked up in CNI_PATH (colon-separated). ADD prints the result JSON on stdout.
// On failure the CNI error (code, msg, details) is printed as JSON on stdout when the plugin
// returned one, a readable message goes to stderr, and the exit status is 1 (2 for usage errors).
//
// Limits of libcni 1.1.2, on purpose not worked around here:
//   - there is no STATUS or GC verb (they arrived with CNI spec 1.1.0 / libcni 1.2; Debian
//     trixie still ships 1.1.2). The status and gc verbs below therefore do what libcni 1.2's
//     GetStatusNetworkList and GCNetworkList do for each plugin of the list, with libcni's own
//     pkg/invoke (FindInPath, ExecPluginWithoutResult): the same environment (CNI_COMMAND,
//     CNI_PATH, the other CNI_* empty), the plugin's config with name and cniVersion of the
//     list, and for GC "cni.dev/valid-attachments" (plus the misspelt "cni.dev/attachments"
//     libcni 1.2 also sends). libcni 1.2's GC first DELs cached attachments that are not
//     valid; that part is left out: the tests call DEL themselves;
//   - it knows result versions up to 1.0.0 only, so cniVersion 1.1.0 configs are tested by
//     executing the plugin directly (tests/vm/lib.sh: cni_exec);
//   - it converts results to its own types, so extension keys such as the plugin's "roce"
//     object are dropped; the direct-exec path shows the raw stdout.
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
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: cnidriver add|check|del <conf-or-conflist> <netns-path> "+
		"[--ifname NAME] [--container-id ID] [--args 'K=V;K=V'] [--cache-dir DIR]\n"+
		"       cnidriver status <conf-or-conflist>\n"+
		"       cnidriver gc <conf-or-conflist> [--valid CONTAINERID/IFNAME,...]")
	os.Exit(2)
}

// pluginConf is one plugin's config as libcni sends it: the list's name and cniVersion
// injected, plus any extra top-level keys.
func pluginConf(list *libcni.NetworkConfigList, plugin *libcni.NetworkConfig, extra map[string]interface{}) ([]byte, error) {
	var conf map[string]interface{}
	if err := json.Unmarshal(plugin.Bytes, &conf); err != nil {
		return nil, err
	}
	conf["name"] = list.Name
	conf["cniVersion"] = list.CNIVersion
	for k, v := range extra {
		conf[k] = v
	}
	return json.Marshal(conf)
}

// execEach runs CNI_COMMAND=command on every plugin of the list, in order, stopping at the
// first error (as libcni 1.2 does for STATUS; for GC it goes on and joins the errors, which
// for the one-plugin lists of the tests is the same).
func execEach(ctx context.Context, list *libcni.NetworkConfigList, paths []string, command string, extra map[string]interface{}) error {
	for _, plugin := range list.Plugins {
		path, err := invoke.FindInPath(plugin.Network.Type, paths)
		if err != nil {
			return err
		}
		conf, err := pluginConf(list, plugin, extra)
		if err != nil {
			return err
		}
		args := &invoke.Args{Command: command, Path: strings.Join(paths, string(os.PathListSeparator))}
		if err := invoke.ExecPluginWithoutResult(ctx, path, conf, args, nil); err != nil {
			return err
		}
	}
	return nil
}

// statusOrGC handles the two CNI 1.1 verbs, which take no netns.
func statusOrGC(verb string, argv []string) {
	if len(argv) < 1 {
		usage()
	}
	fs := flag.NewFlagSet("cnidriver", flag.ContinueOnError)
	valid := fs.String("valid", "", "GC: attachments still in use, as CONTAINERID/IFNAME,...")
	if err := fs.Parse(argv[1:]); err != nil || fs.NArg() != 0 || (verb == "status" && *valid != "") {
		usage()
	}
	list, err := loadList(argv[0])
	if err != nil {
		fail(err)
	}
	paths := filepath.SplitList(os.Getenv("CNI_PATH"))
	if len(paths) == 0 {
		fail(errors.New("CNI_PATH is empty: set it to the directory holding the plugins"))
	}
	ctx := context.Background()
	if verb == "status" {
		if err := execEach(ctx, list, paths, "STATUS", nil); err != nil {
			fail(err)
		}
		return
	}
	attachments := []map[string]string{}
	for _, a := range strings.Split(*valid, ",") {
		if a == "" {
			continue
		}
		cid, ifname, ok := strings.Cut(a, "/")
		if !ok {
			fail(fmt.Errorf("--valid: %q is not CONTAINERID/IFNAME", a))
		}
		attachments = append(attachments, map[string]string{"containerID": cid, "ifname": ifname})
	}
	extra := map[string]interface{}{
		"cni.dev/valid-attachments": attachments,
		"cni.dev/attachments":       attachments,
	}
	if err := execEach(ctx, list, paths, "GC", extra); err != nil {
		fail(err)
	}
}

// loadList accepts both a .conflist and a single-plugin .conf, like cnitool and Multus do.
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
		return libcni.ConfListFromBytes(raw)
	}
	conf, err := libcni.ConfFromBytes(raw)
	if err != nil {
		return nil, err
	}
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

func fail(err error) {
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		// Keep the plugin's error machine-readable for the tests (code 104 and friends).
		_ = json.NewEncoder(os.Stdout).Encode(cniErr)
	}
	fmt.Fprintln(os.Stderr, "cnidriver:", err)
	os.Exit(1)
}

func main() {
	if len(os.Args) >= 2 && (os.Args[1] == "status" || os.Args[1] == "gc") {
		statusOrGC(os.Args[1], os.Args[2:])
		return
	}
	if len(os.Args) < 4 {
		usage()
	}
	verb, confPath, netns := os.Args[1], os.Args[2], os.Args[3]

	fs := flag.NewFlagSet("cnidriver", flag.ContinueOnError)
	ifname := fs.String("ifname", "net1", "interface name inside the netns")
	// Default the container ID to the netns name so ADD and DEL pair up without extra flags.
	containerID := fs.String("container-id", "cnidriver-"+filepath.Base(netns), "container ID")
	cniArgs := fs.String("args", "", "CNI_ARGS as 'K=V;K=V'")
	cacheDir := fs.String("cache-dir", "", "libcni result cache (default /var/lib/cni)")
	if err := fs.Parse(os.Args[4:]); err != nil || fs.NArg() != 0 {
		usage()
	}

	list, err := loadList(confPath)
	if err != nil {
		fail(err)
	}
	args, err := parseArgs(*cniArgs)
	if err != nil {
		fail(err)
	}
	paths := filepath.SplitList(os.Getenv("CNI_PATH"))
	if len(paths) == 0 {
		fail(errors.New("CNI_PATH is empty: set it to the directory holding the plugins"))
	}

	cni := libcni.NewCNIConfigWithCacheDir(paths, *cacheDir, nil)
	rt := &libcni.RuntimeConf{ContainerID: *containerID, NetNS: netns, IfName: *ifname, Args: args}
	ctx := context.Background()
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
		if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	case "del":
		if err := cni.DelNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	default:
		usage()
	}
}
