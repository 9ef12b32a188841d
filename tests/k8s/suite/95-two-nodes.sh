# shellcheck shell=bash
# Two nodes (K8S_NODES=2, tests/k8s/run.sh): RDMA between a pod on roce-node (fabric host a) and
# a pod on roce-node-b (host b), over the wires between the hosts, one a rail. The pods are the
# two ranks of a user's job: the examples' one NAD for every rail (pod-16-rails-one-nad.yaml)
# with its nv-ipam pool (a100-ippool.yaml), the RDMA shared resource, and a required pod
# anti-affinity, so that the scheduler (not the test) puts them on different nodes.
# ib_write_bw runs on the four rails at once, each side with the GID index ADD wrote into its
# own child's ifalias, read in its pod; the out-of-band exchange goes over the cluster network
# (the pods' eth0, routed between the nodes). Each rail's byte counters on both hosts then show
# that rail's pair and no other rail's data.

PAIR_SIZE=65536
PAIR_ITERS=100
PAIR_PORT=18515

# rank_pod NAME: one rank of the pair (label roce-ipvlan.test/pair=ranks), on every rail
rank_pod() {
	kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: { roce-ipvlan.test/pair: ranks }
  annotations:
    k8s.v1.cni.cncf.io/networks: rdma-all-rails
spec:
  terminationGracePeriodSeconds: 1
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: { matchLabels: { roce-ipvlan.test/pair: ranks } }
          topologyKey: kubernetes.io/hostname
  containers:
    - name: main
      image: $TESTPOD_IMAGE
      imagePullPolicy: IfNotPresent
      command: ["sleep", "infinity"]
      resources:
        requests: { rdma/rdma_shared_device_a: 1 }
        limits: { rdma/rdma_shared_device_a: 1 }
      securityContext:
        capabilities: { add: ["IPC_LOCK"] }
YAML
}

# rank_rail POD RAIL: "DEVICE GID_INDEX ADDRESS" of the pod's child on rail RAIL (net1rRAIL):
# the device and index from the ifalias ADD wrote, the address from the child, and the GID at
# that index, read in the pod, must be that address's RoCE v2 GID.
rank_rail() {
	local pod=$1 ifn=net1r$2 alias kv dev="" port="" idx="" addr
	alias=$(in_pod "$pod" cat "/sys/class/net/$ifn/ifalias")
	for kv in $alias; do
		case $kv in rdma_dev=*) dev=${kv#*=} ;; port=*) port=${kv#*=} ;; gid_index=*) idx=${kv#*=} ;; esac
	done
	[[ -n $dev && -n $port && -n $idx ]] || fail "$pod/$ifn's ifalias names no RDMA device, port and GID index: '$alias'"
	addr=$(in_pod "$pod" ip -4 -o addr show dev "$ifn" scope global | awk '{split($4, a, "/"); print a[1]; exit}')
	[[ -n $addr ]] || fail "$pod/$ifn has no IPv4 address"
	assert_eq "$(in_pod "$pod" cat "/sys/class/infiniband/$dev/ports/$port/gids/$idx")" "$(gid_of_ipv4 "$addr")" \
		"GID $dev/$port/$idx read in $pod (its ifalias: '$alias')"
	echo "$dev $idx $addr"
}

# rails_bytes HOST DIR: "b0 b1 b2 b3", the byte counters (tx or rx) of HOST's rails rdma0..rdma3
rails_bytes() {
	# shellcheck disable=SC2016 # expanded on the host
	on "$1" bash -c 'for r in rdma0 rdma1 rdma2 rdma3; do printf "%s " "$(cat /sys/class/net/$r/statistics/$0_bytes)"; done' "$2"
}

test_two_nodes_roce_every_rail_between_pods_on_two_nodes() {
	# shellcheck source=tests/fabric/lib.sh
	source "$FABRIC_LIB"
	local n pod cli="" srv="" i dev_c idx_c addr_c dev_s idx_s addr_s srv_ip pids=() cpids=() rc
	local a0 a1 b0 b1 da db want=$((PAIR_SIZE * PAIR_ITERS)) cli_args=()
	kubectl apply -f "$ROCE_REPO/examples/a100-ippool.yaml" >/dev/null
	example_nad examples/pod-16-rails-one-nad.yaml rdma-all-rails
	rank_pod rank0
	rank_pod rank1
	for pod in rank0 rank1; do
		wait_pod_ready "$pod" 420 || { kubectl describe pod "$pod" | tail -n 15; fail "pod $pod is not Ready"; }
		n=$(kubectl get pod "$pod" -o jsonpath='{.spec.nodeName}')
		note "$pod on $n, cluster address $(kubectl get pod "$pod" -o jsonpath='{.status.podIP}')"
		case $n in "$K8S_NODE") cli=$pod ;; "$K8S_NODE_B") srv=$pod ;; esac
	done
	[[ -n $cli && -n $srv ]] || fail "the anti-affine pods are not one on each node: $(kubectl get pods -o wide --no-headers | tr '\n' ';')"
	srv_ip=$(kubectl get pod "$srv" -o jsonpath='{.status.podIP}')
	read -r -a a0 <<<"$(rails_bytes a tx)"
	read -r -a b0 <<<"$(rails_bytes b rx)"
	for i in 0 1 2 3; do
		read -r dev_s idx_s addr_s <<<"$(rank_rail "$srv" "$i")"
		read -r dev_c idx_c addr_c <<<"$(rank_rail "$cli" "$i")"
		note "rail $i: $cli $addr_c ($dev_c GID $idx_c) -> $srv $addr_s ($dev_s GID $idx_s)"
		in_pod "$srv" timeout 120 ib_write_bw -d "$dev_s" -x "$idx_s" -s "$PAIR_SIZE" -n "$PAIR_ITERS" -F \
			-p $((PAIR_PORT + i)) >"/tmp/pair-srv-$i.log" 2>&1 &
		pids+=($!)
		cli_args[i]="-d $dev_c -x $idx_c"
	done
	sleep 5 # the servers listen on their out-of-band ports
	for i in 0 1 2 3; do
		# shellcheck disable=SC2086 # cli_args: words
		in_pod "$cli" timeout 120 ib_write_bw ${cli_args[i]} -s "$PAIR_SIZE" -n "$PAIR_ITERS" -F \
			-p $((PAIR_PORT + i)) "$srv_ip" >"/tmp/pair-cli-$i.log" 2>&1 &
		cpids+=($!)
	done
	for i in 0 1 2 3; do
		rc=0
		wait "${cpids[i]}" || rc=$?
		((rc == 0)) || fail "ib_write_bw in $cli on rail $i exited $rc: $(tail -n 6 "/tmp/pair-cli-$i.log" | tr '\n' ' ')"
		rc=0
		wait "${pids[i]}" || rc=$?
		((rc == 0)) || fail "ib_write_bw in $srv on rail $i exited $rc: $(tail -n 6 "/tmp/pair-srv-$i.log" | tr '\n' ' ')"
		grep -qE "^ *$PAIR_SIZE +$PAIR_ITERS " "/tmp/pair-cli-$i.log" || fail "no result line on rail $i: $(cat "/tmp/pair-cli-$i.log")"
		note "rail $i: $(grep -E "^ *$PAIR_SIZE +$PAIR_ITERS " "/tmp/pair-cli-$i.log" | awk '{print $4 " MB/s average"}')"
	done
	read -r -a a1 <<<"$(rails_bytes a tx)"
	read -r -a b1 <<<"$(rails_bytes b rx)"
	for i in 0 1 2 3; do
		da=$((a1[i] - a0[i])) db=$((b1[i] - b0[i]))
		note "rail $i: node $K8S_NODE rdma$i tx +$da bytes, node $K8S_NODE_B rdma$i rx +$db bytes (one flow: $want)"
		((da >= want && db >= want)) || fail "rail $i carried less than its pair's $want bytes (tx +$da on a, rx +$db on b): the data went another way"
		((2 * da <= 3 * want && 2 * db <= 3 * want)) ||
			fail "rail $i carried more than one flow (tx +$da on a, rx +$db on b, for $want): another rail's data went over it"
	done
}
