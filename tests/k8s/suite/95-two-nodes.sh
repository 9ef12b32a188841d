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

# rank_pod NAME: one rank of the pair, on every rail: testpod with the label
# roce-ipvlan.test/pair=ranks and a required anti-affinity to the other pods with that label
rank_pod() {
	testpod_yaml "$1" rdma-all-rails | kubectl create --dry-run=client -o json -f - |
		jq '.metadata.labels["roce-ipvlan.test/pair"] = "ranks"
			| .spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution = [{
				labelSelector: {matchLabels: {"roce-ipvlan.test/pair": "ranks"}},
				topologyKey: "kubernetes.io/hostname"}]' |
		kubectl apply -f - >/dev/null
}

# rank_rails POD: one line per rail i, "i DEVICE GID_INDEX ADDRESS GID", read in the pod in one
# exec (each exec is seconds under TCG): the device and index from the ifalias ADD wrote on
# net1r<i>, the child's address, and the GID the pod reads at that index.
rank_rails() {
	# shellcheck disable=SC2016 # expanded in the pod
	in_pod "$1" sh -c 'for i in 0 1 2 3; do
		ifn=net1r$i dev="" port="" idx=""
		for kv in $(cat /sys/class/net/$ifn/ifalias); do
			case $kv in rdma_dev=*) dev=${kv#*=} ;; port=*) port=${kv#*=} ;; gid_index=*) idx=${kv#*=} ;; esac
		done
		addr=$(ip -4 -o addr show dev $ifn scope global | awk "{split(\$4, a, \"/\"); print a[1]; exit}")
		echo "$i ${dev:--} ${idx:--} ${addr:--} $(cat /sys/class/infiniband/$dev/ports/$port/gids/$idx 2>/dev/null || echo -)"
	done'
}

# perf_all POD ARGS_0 ARGS_1 ARGS_2 ARGS_3: ib_write_bw with each rail's ARGS at once in POD, in
# one exec; prints each one's output after "== rail I exit RC".
perf_all() {
	local pod=$1
	shift
	# shellcheck disable=SC2016 # expanded in the pod
	in_pod "$pod" sh -c 'i=0
		for args in "$@"; do
			(timeout 300 ib_write_bw $args >/tmp/bw-$i.log 2>&1; echo $? >/tmp/bw-$i.rc) &
			i=$((i + 1))
		done
		wait
		for i in 0 1 2 3; do echo "== rail $i exit $(cat /tmp/bw-$i.rc)"; cat /tmp/bw-$i.log; done' perf "$@"
}

# servers_listening POD: the four perftest servers in POD listen on their out-of-band ports
# (PAIR_PORT and the three after it, LISTEN in the pod's /proc/net/tcp or tcp6)
servers_listening() {
	local ports n
	ports=$(printf '%04X|%04X|%04X|%04X' "$PAIR_PORT" $((PAIR_PORT + 1)) $((PAIR_PORT + 2)) $((PAIR_PORT + 3)))
	n=$(in_pod "$1" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -cE ":($ports) [0-9A-F]+:0000 0A")
	((n == 4))
}

test_two_nodes_roce_every_rail_between_pods_on_two_nodes() {
	# shellcheck source=tests/fabric/lib.sh
	source "$FABRIC_LIB"
	local n pod cli="" srv="" i srv_ip rails_c rails_s dev idx addr gid srv_args=() cli_args=() out_s out_c rc
	local a0 a1 b0 b1 da db want=$((PAIR_SIZE * PAIR_ITERS)) common="-s $PAIR_SIZE -n $PAIR_ITERS -F"
	kubectl apply -f "$ROCE_REPO/examples/a100-ippool.yaml" >/dev/null
	# The NAD's time limits raised, as its error message tells an operator to: on node b's one TCG
	# CPU, four nv-ipam ADDs at once (a Go binary each, and ipam-node's answers) took more than
	# the default 10 s per IPAM call (code 103 in Multus's log, the sandbox retried).
	example_nad examples/pod-16-rails-one-nad.yaml rdma-all-rails "" '.timeouts = {ipamMs: 60000, totalMs: 100000}'
	rank_pod rank0
	rank_pod rank1
	for pod in rank0 rank1; do
		wait_pod_ready "$pod" 600 || { kubectl describe pod "$pod" | tail -n 15; fail "pod $pod is not Ready"; }
		n=$(kubectl get pod "$pod" -o jsonpath='{.spec.nodeName}')
		note "$pod on $n, cluster address $(kubectl get pod "$pod" -o jsonpath='{.status.podIP}')"
		case $n in "$K8S_NODE") cli=$pod ;; "$K8S_NODE_B") srv=$pod ;; esac
	done
	[[ -n $cli && -n $srv ]] || fail "the anti-affine pods are not one on each node: $(kubectl get pods -o wide --no-headers | tr '\n' ';')"
	srv_ip=$(kubectl get pod "$srv" -o jsonpath='{.status.podIP}')
	rails_s=$(rank_rails "$srv")
	rails_c=$(rank_rails "$cli")
	for pod in "$srv" "$cli"; do
		[[ $pod == "$srv" ]] && out_s=$rails_s || out_s=$rails_c
		while read -r i dev idx addr gid; do
			[[ $dev != - && $idx != - && $addr != - ]] || fail "$pod/net1r$i: no RDMA device, GID index or address from its ifalias and child: '$dev $idx $addr'"
			assert_eq "$gid" "$(gid_of_ipv4 "$addr")" "GID $dev/$idx read in $pod (net1r$i's ifalias names it; its address $addr)"
			note "$pod net1r$i: $addr, $dev GID $idx"
			if [[ $pod == "$srv" ]]; then
				srv_args[i]="-d $dev -x $idx $common -p $((PAIR_PORT + i))"
			else
				cli_args[i]="-d $dev -x $idx $common -p $((PAIR_PORT + i)) $srv_ip"
			fi
		done <<<"$out_s"
	done
	read -r -a a0 <<<"$(rail_bytes a tx)"
	read -r -a b0 <<<"$(rail_bytes b rx)"
	perf_all "$srv" "${srv_args[@]}" >/tmp/pair-srv.log 2>&1 &
	local spid=$!
	# The clients start once all four servers listen: a fixed 10 s was too short for two of them
	# in one run (an exec into the pod on b takes seconds under TCG; "Couldn't connect").
	wait_for 180 "the perftest servers in $srv to listen on ports $PAIR_PORT..$((PAIR_PORT + 3))" servers_listening "$srv" ||
		fail "the perftest servers in $srv do not all listen: $(tail -n 8 /tmp/pair-srv.log | tr '\n' ' ')"
	rc=0
	perf_all "$cli" "${cli_args[@]}" >/tmp/pair-cli.log 2>&1 || rc=$?
	((rc == 0)) || fail "kubectl exec of the clients in $cli exited $rc: $(tail -n 8 /tmp/pair-cli.log | tr '\n' ' ')"
	wait "$spid" || fail "kubectl exec of the servers in $srv failed: $(tail -n 8 /tmp/pair-srv.log | tr '\n' ' ')"
	for i in 0 1 2 3; do
		for pod in "$cli" "$srv"; do
			[[ $pod == "$cli" ]] && out_c=/tmp/pair-cli.log || out_c=/tmp/pair-srv.log
			grep -q "^== rail $i exit 0$" "$out_c" ||
				fail "ib_write_bw in $pod on rail $i: $(sed -n "/^== rail $i /,/^== rail/p" "$out_c" | tail -n 8 | tr '\n' ' ')"
		done
		note "rail $i: $(sed -n "/^== rail $i /,/^== rail/p" /tmp/pair-cli.log | grep -E "^ *$PAIR_SIZE +$PAIR_ITERS " | awk '{print $4 " MB/s average"}')"
	done
	read -r -a a1 <<<"$(rail_bytes a tx)"
	read -r -a b1 <<<"$(rail_bytes b rx)"
	for i in 0 1 2 3; do
		da=$((a1[i] - a0[i])) db=$((b1[i] - b0[i]))
		note "rail $i: node $K8S_NODE rdma$i tx +$da bytes, node $K8S_NODE_B rdma$i rx +$db bytes (one flow: $want)"
		((da >= want && db >= want)) || fail "rail $i carried less than its pair's $want bytes (tx +$da on a, rx +$db on b): the data went another way"
		((2 * da <= 3 * want && 2 * db <= 3 * want)) ||
			fail "rail $i carried more than one flow (tx +$da on a, rx +$db on b, for $want): another rail's data went over it"
	done
}
