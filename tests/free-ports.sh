# shellcheck shell=bash
# Free ports on the host's 127.0.0.1 for what a test starts there (QEMU's socket links,
# tests/fabric/run.sh; the API server of tests/k8s/crd-test.sh); sourced, not run. Other VMs and
# tests may run on the same machine at the same time, so nothing binds a fixed port.
#
#   free_ports N [udp|tcp]   N ports (default UDP), all picked in one go (no two alike) below
#                            the kernel's ephemeral range, so that no other socket on the host
#                            (a DNS lookup's, say) takes one between now and the caller's bind;
#                            each is free on 127.0.0.1 when picked. Prints them on one line.
free_ports() {
	python3 - "$1" "${2:-udp}" <<'EOF'
import random, socket, sys
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
want, socks = int(sys.argv[1]), []
kind = {"udp": socket.SOCK_DGRAM, "tcp": socket.SOCK_STREAM}[sys.argv[2]]
for port in random.sample(range(10000, low), low - 10000):
    if len(socks) == want:
        break
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        continue
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}
