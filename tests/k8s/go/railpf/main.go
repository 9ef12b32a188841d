// railpf: a minimal Kubernetes device plugin for the test node, offering what the real device
// plugins cannot offer on its Soft-RoCE rails.
//
// With -shared it offers a resource in the role of the RDMA shared device plugin
// (rdma/rdma_shared_device_a in the examples): any number of pods, up to -slots, each getting
// every rail's RDMA character devices. The real one (served by the proxy) finds a PCI function's
// RDMA device under the function in sysfs, where a ConnectX has it and Soft-RoCE does not (an
// rxe device's parent is the netdev), so it offers nothing here (docs/testing.md quotes its log).
//
// With -resource it also offers one device per rail by PCI address, the contract of the SR-IOV
// network device plugin (nvidia.com/hostdev): Allocate mounts the rail's RDMA character devices
// and sets PCIDEVICE_<RESOURCE>. The node runs the real SR-IOV network device plugin for that
// now (tests/k8s/manifests/sriovdp); this stays for a node without it.
//
//	railpf -shared rdma/rdma_shared_device_a [-resource nvidia.com/hostdev] [-netdevs 'rdma*']
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

var pciAddr = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

type rail struct {
	netdev, pci string
	devs        []string // /dev/infiniband/* of the rail's RDMA device, and rdma_cm
}

type server struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	rails    map[string]rail // by PCI address
	slots    int             // > 0: a shared resource of that many devices, each all rails
}

// discover: netdevs matching the glob that sit on a PCI function, with their RDMA device's
// uverbs node (Soft-RoCE names its netdev in the device's "parent" attribute).
func discover(glob string) (map[string]rail, error) {
	names, err := filepath.Glob("/sys/class/net/" + glob)
	if err != nil {
		return nil, err
	}
	out := map[string]rail{}
	for _, p := range names {
		nd := filepath.Base(p)
		dev, err := filepath.EvalSymlinks(p + "/device")
		if err != nil {
			continue // not on a PCI function
		}
		// A virtio NIC's "device" is the virtio device (virtio5); its PCI function is the parent.
		if !pciAddr.MatchString(filepath.Base(dev)) {
			dev = filepath.Dir(dev)
		}
		if !pciAddr.MatchString(filepath.Base(dev)) {
			continue // not on a PCI function
		}
		r := rail{netdev: nd, pci: filepath.Base(dev)}
		verbs, _ := filepath.Glob("/sys/class/infiniband_verbs/uverbs*")
		for _, v := range verbs {
			ib, err := os.ReadFile(v + "/ibdev")
			if err != nil {
				continue
			}
			parent, err := os.ReadFile("/sys/class/infiniband/" + strings.TrimSpace(string(ib)) + "/parent")
			if err == nil && strings.TrimSpace(string(parent)) == nd {
				r.devs = append(r.devs, "/dev/infiniband/"+filepath.Base(v))
			}
		}
		r.devs = append(r.devs, "/dev/infiniband/rdma_cm")
		// Only nodes that exist: a missing one would fail every container that gets it.
		var have []string
		for _, d := range r.devs {
			if _, err := os.Stat(d); err == nil {
				have = append(have, d)
			} else {
				log.Printf("%s: not offering %s: %v", nd, d, err)
			}
		}
		r.devs = have
		out[r.pci] = r
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no netdev matching %q sits on a PCI function", glob)
	}
	return out, nil
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (s *server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	var devs []*pluginapi.Device
	for pci := range s.rails {
		devs = append(devs, &pluginapi.Device{ID: pci, Health: pluginapi.Healthy})
	}
	if s.slots > 0 {
		devs = nil
		for i := 0; i < s.slots; i++ {
			devs = append(devs, &pluginapi.Device{ID: fmt.Sprintf("slot-%03d", i), Health: pluginapi.Healthy})
		}
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].ID < devs[j].ID })
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	env := "PCIDEVICE_" + strings.NewReplacer(".", "_", "/", "_").Replace(strings.ToUpper(s.resource))
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		car := &pluginapi.ContainerAllocateResponse{}
		ids := c.DevicesIds
		if s.slots > 0 { // every rail, whichever slots
			ids = nil
			for pci := range s.rails {
				ids = append(ids, pci)
			}
			sort.Strings(ids)
		} else {
			car.Envs = map[string]string{env: strings.Join(ids, ",")}
		}
		seen := map[string]bool{}
		for _, id := range ids {
			r, ok := s.rails[id]
			if !ok {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			for _, d := range r.devs {
				if !seen[d] {
					seen[d] = true
					car.Devices = append(car.Devices, &pluginapi.DeviceSpec{ContainerPath: d, HostPath: d, Permissions: "rw"})
				}
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}

// serve starts the plugin's gRPC server on its socket and registers it with kubelet.
func serve(srv *server, sockName string) {
	sock := filepath.Join(pluginapi.DevicePluginPath, sockName)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, srv)
	go func() { log.Fatal(g.Serve(lis)) }()

	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: sockName, ResourceName: srv.resource,
	}); err != nil {
		log.Fatalf("registering %s with kubelet: %v", srv.resource, err)
	}
	log.Printf("registered %s with kubelet", srv.resource)
}

func main() {
	resource := flag.String("resource", "", "also offer this resource, a device per rail by PCI address (none when empty)")
	glob := flag.String("netdevs", "rdma*", "netdevs offered (glob)")
	shared := flag.String("shared", "", "also offer this resource, each device all rails (none when empty)")
	slots := flag.Int("slots", 64, "devices of the -shared resource")
	flag.Parse()
	rails, err := discover(*glob)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rails {
		log.Printf("offering %s (netdev %s, %s)", r.pci, r.netdev, strings.Join(r.devs, " "))
	}
	if *resource != "" {
		serve(&server{resource: *resource, rails: rails}, "railpf.sock")
	}
	if *shared != "" {
		serve(&server{resource: *shared, rails: rails, slots: *slots}, "railpf-shared.sock")
	}
	select {}
}
