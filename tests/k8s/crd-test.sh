#!/usr/bin/env bash
# The Kubernetes suite's CRD tests (suite/90-crds.sh) on the host, against an API server of
# their own: they need `kubectl apply --dry-run=server` and `roce-ipvlan validate --strict`, not
# a node, so no VM boots (docs/testing.md, "The CRD tests on the host").
#
#   tests/k8s/crd-test.sh [PATTERN...]     (PATTERN: as tests/k8s/suite/run.sh takes it)
#
# Takes the node's etcd, kube-apiserver, kube-controller-manager and kubectl (tests/k8s/build.sh
# --control-plane: built once and cached, or waited for while another build holds the cache) and
# starts them in a temporary folder, on 127.0.0.1 only and on free ports (other VMs and tests may
# run on this machine): the API server with the node's flags, certificates and admission plugins
# (tests/k8s/lib.sh), the controller manager with its service-account controller alone, which
# gives each namespace the `default` ServiceAccount a pod's admission needs. Then the suite's
# runner on 90-crds.sh (K8S_API_ONLY=1: its header). Everything started is stopped on exit and
# the folder removed.
# Environment: ROCE_IPVLAN_BIN (default target/debug/roce-ipvlan, `make build`), SUITE_EXPECT.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
plugin=${ROCE_IPVLAN_BIN:-$repo/target/debug/roce-ipvlan}
[[ -x $plugin ]] || { echo "crd-test: no $plugin: run 'make build' or set ROCE_IPVLAN_BIN" >&2; exit 2; }
cache=$("$here/build.sh" --control-plane)
work=$(mktemp -d "${TMPDIR:-/tmp}/roce-crd-test.XXXXXX")
pki=$work/pki
mkdir -p "$pki" "$work/logs"
export PATH=$cache/bin:$PATH KUBECONFIG=$work/admin.kubeconfig K8S_LOGS=$work/logs
# shellcheck source=tests/k8s/lib.sh
source "$here/lib.sh"
# shellcheck source=tests/free-ports.sh
source "$repo/tests/free-ports.sh"

t0=$SECONDS
step() { echo "crd-test: [$((SECONDS - t0))s] $*" >&2; }

# stop_daemon NAME: SIGTERM, SIGKILL if it is still there 30 s later, then reaped (a daemon is
# a child of this shell: lib.sh's daemon).
# shellcheck disable=SC2317 # called by the EXIT trap
stop_daemon() {
	local pid state _
	pid=$(cat "$K8S_LOGS/$1.pid" 2>/dev/null) || return 0
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq 300); do
		read -r _ _ state _ 2>/dev/null <"/proc/$pid/stat" || break
		[[ $state == Z ]] && break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
# In the reverse order of their start: the API server's graceful shutdown waits for etcd.
# shellcheck disable=SC2317 # called by the EXIT trap
stop() {
	stop_daemon kube-controller-manager
	stop_daemon kube-apiserver
	stop_daemon etcd
	rm -rf "$work"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck disable=SC2317 # called when a wait fails
started_badly() {
	local f
	echo "crd-test: the control plane did not come up; last lines of each log:" >&2
	for f in "$K8S_LOGS"/*.log; do
		echo "--- ${f##*/}" >&2
		tail -n 20 "$f" | cut -c1-400 >&2
	done
	exit 1
}

step "certificates"
read -r etcd_port peer_port api_port <<<"$(free_ports 3 tcp)"
[[ -n $api_port ]] || { echo "crd-test: found no 3 free TCP ports on 127.0.0.1" >&2; exit 1; }
pki_init "$pki"
cert "$pki" apiserver /CN=kube-apiserver "DNS:localhost,IP:127.0.0.1"
cert "$pki" admin "/O=system:masters/CN=kubernetes-admin"
cert "$pki" controller-manager /CN=system:kube-controller-manager
kubeconfig "$KUBECONFIG" "https://127.0.0.1:$api_port" "$pki" admin
kubeconfig "$work/controller-manager.kubeconfig" "https://127.0.0.1:$api_port" "$pki" controller-manager

step "etcd (127.0.0.1:$etcd_port), kube-apiserver (127.0.0.1:$api_port)"
daemon etcd --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$etcd_port" \
	--advertise-client-urls "http://127.0.0.1:$etcd_port" --listen-peer-urls "http://127.0.0.1:$peer_port" \
	--initial-advertise-peer-urls "http://127.0.0.1:$peer_port" --initial-cluster "default=http://127.0.0.1:$peer_port" \
	--unsafe-no-fsync --log-level warn
# No endpoints for the `kubernetes` Service: the one address here is loopback, which an
# Endpoints object may not hold, and nothing reaches the API through the Service.
apiserver "$pki" "http://127.0.0.1:$etcd_port" "$api_port" 127.0.0.1 --bind-address 127.0.0.1 \
	--endpoint-reconciler-type none
wait_for 120 "the API server to be ready" kubectl get --raw /readyz || started_badly
# No HTTPS of its own (--secure-port 0): nothing else binds a port.
daemon kube-controller-manager --kubeconfig "$work/controller-manager.kubeconfig" \
	--controllers serviceaccount-controller --secure-port 0 --leader-elect=false --profiling=false --v=1
wait_for 60 "the default namespace's default ServiceAccount" kubectl -n default get serviceaccount default ||
	started_badly
step "API server ready; tests/k8s/suite/run.sh on 90-crds.sh"

set +e
ROCE_REPO=$repo ROCE_IPVLAN_BIN=$plugin K8S_API_ONLY=1 SUITE_FILES='^90-' bash "$here/suite/run.sh" "$@"
rc=$?
set -e
step "done"
exit "$rc"
