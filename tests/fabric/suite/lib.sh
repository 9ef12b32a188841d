# shellcheck shell=bash
# shellcheck disable=SC2034 # POD_NET_A: for the tests
# Helpers of the fabric suite (host a; FABRIC_LIB and tests/vm/suite/lib.sh are sourced first).
# Pod A is a netns on host a, pod B one on host b; both are attached by roce-ipvlan through
# libcni (cnidriver) on their own host, as the host's runtime would.

# fabric_cleanup: the EXIT trap of every test: both pods deleted with their attachments.
fabric_cleanup() {
	local h
	for h in a b; do
		# shellcheck disable=SC2016 # expanded on the host
		on "$h" bash -c 'for c in /run/fabric/conf-$0-*.json; do
			[[ -e $c ]] || continue
			ifn=$(jq -r ".ifname // \"net1\"" "$c.meta" 2>/dev/null || echo net1)
			cnidriver del "$c" /run/netns/pod$0 --ifname "$ifn" --container-id pod$0 >/dev/null 2>&1
			rm -f "$c" "$c.meta"
		done
		ip netns del pod$0 2>/dev/null; rm -rf /var/lib/cni/fabric; true' "${h^^}" >/dev/null 2>&1 || true
	done
}

# attach HOST CONF IFNAME: roce-ipvlan ADD of pod<HOST> on HOST through libcni; the config
# lands in /run/fabric for DEL. Prints the result.
attach() {
	local host=$1 conf=$2 ifn=$3 name
	name=/run/fabric/conf-${host^^}-$ifn.json
	cp "$conf" "$name"
	jq -n --arg i "$ifn" '{ifname: $i}' >"$name.meta"
	on "$host" cnidriver add "$name" "/run/netns/pod${host^^}" --ifname "$ifn" --container-id "pod${host^^}" ||
		fail "ADD of pod${host^^} $ifn on host $host failed"
}

# new_pods: a pod netns on each host with only the cluster network (eth0); sets POD_NET_A and
# POD_NET_B, their eth0 addresses
new_pods() {
	local h
	for h in a b; do
		on "$h" ip netns add "pod${h^^}"
		on "$h" ip -n "pod${h^^}" link set lo up
	done
	POD_NET_A=$(fabric_pod_network podA)
	POD_NET_B=$(on b fabric_pod_network podB)
}

# flat_conf HOST [EXTRA_JSON]: HOST's pods' configuration on flat, in /tmp/flat-HOST.json: every
# rail with one attachment ("rails": ["rdma*"], children net1r0..net1r3), host-local from the
# host's pod range
flat_conf() {
	local first last
	read -r first last <<<"$(fabric_pod_range "$1")"
	jq -n --arg s "$first" --arg e "$last" --arg subnet "$FABRIC_SUBNET4" \
		--argjson limits "$VM_TIMEOUTS" --argjson extra "${2:-{\}}" \
		'{cniVersion: "1.0.0", name: "fabric", type: "roce-ipvlan", rails: ["rdma*"],
		  ipam: {type: "host-local", subnet: $subnet, rangeStart: $s, rangeEnd: $e,
		         dataDir: "/var/lib/cni/fabric"}} + $limits + $extra' >"/tmp/flat-$1.json"
	echo "/tmp/flat-$1.json"
}

# flat_pods EXTRA_JSON: pod A and pod B (new_pods), each attached with flat_conf
flat_pods() {
	new_pods
	flat_attach "$1"
}

# flat_attach EXTRA_JSON: the pods of new_pods attached with flat_conf, each on its host
flat_attach() {
	local h
	for h in a b; do attach "$h" "$(flat_conf "$h" "$1")" net1 >"/tmp/flat-$h.result"; done
}

# flat_addrs: ADDR_A[i], pod A's address on its rail-i child (net1ri), after flat_pods
flat_addrs() {
	local i
	for i in 0 1 2 3; do ADDR_A[i]=$(child_addr a "net1r$i"); done
}

# fabric_conf_file HOST: the layout's plain configuration for HOST's pods (a file)
fabric_conf_file() {
	if [[ $FABRIC_LAYOUT == flat ]]; then flat_conf "$1" '{}'; else routed_conf "$1" ''; fi
}

# child_alias HOST IFNAME: the ifalias ADD wrote on the pod's child (read in the pod)
child_alias() { on "$1" ip netns exec "pod${1^^}" cat "/sys/class/net/$2/ifalias"; }
alias_field() { # alias_field ALIAS KEY
	local kv
	for kv in $1; do [[ $kv == "$2"=* ]] && { echo "${kv#*=}"; return 0; }; done
	return 1
}
# child_addr HOST IFNAME [4|6]: the child's address (global scope), without the length
child_addr() {
	on "$1" ip netns exec "pod${1^^}" ip -"${3:-4}" -o addr show dev "$2" scope global |
		awk '{split($4, a, "/"); print a[1]; exit}'
}

# fabric_pods: the pods of this layout on every rail (flat_pods or routed_pods)
fabric_pods() {
	if [[ $FABRIC_LAYOUT == flat ]]; then flat_pods '{}'; else routed_pods ''; fi
}

# routed_pods [placeholder]: pod A and pod B on every rail by SLAAC from the rail router, one
# attachment each ("rails", no IPAM); with "placeholder" host-local also gives each child an
# address of fd01:0:0:100::/112 (a: ::a00-::aff, b: ::b00-::bff), as the chains being migrated
# from do (docs/ipv6.md)
routed_pods() {
	local h
	new_pods
	for h in a b; do attach "$h" "$(routed_conf "$h" "${1:-}")" net1 >"/tmp/routed-$h.result"; done
}

# routed_conf HOST [placeholder]: the configuration of routed_pods, in /tmp/routed-HOST.json
routed_conf() {
	local ipam='{}'
	[[ ${2:-} == placeholder ]] && ipam=$(jq -n --arg s "fd01:0:0:100::${1}00" --arg e "fd01:0:0:100::${1}ff" \
		'{ipam: {type: "host-local", subnet: "fd01:0:0:100::/112", rangeStart: $s, rangeEnd: $e,
		         dataDir: "/var/lib/cni/fabric"}}')
	jq -n --argjson limits "$VM_TIMEOUTS" --argjson ipam "$ipam" \
		'{cniVersion: "1.0.0", name: "fabric6", type: "roce-ipvlan", rails: ["rdma*"],
		  ipv6: {slaac: true}} + $limits + $ipam' >"/tmp/routed-$1.json"
	echo "/tmp/routed-$1.json"
}

# slaac_addr HOST IFNAME: the child's SLAAC address (in its host's /64 of that rail)
slaac_addr() {
	on "$1" ip netns exec "pod${1^^}" ip -6 -o addr show dev "$2" scope global |
		awk '{split($4, a, "/"); if (a[1] ~ /^2001:db8:/) {print a[1]; exit}}'
}

# --- RDMA between the pods ---

BW_SIZE=65536
BW_ITERS=100
BW_PORT=18515

# rail_pairs: per rail i, from the ifaliases: DEV_A[i] IDX_A[i] DEV_B[i] IDX_B[i], and the
# children's addresses ADDR_A[i] ADDR_B[i].
rail_pairs() {
	local i alias fam=4
	[[ $FABRIC_LAYOUT == routed6 ]] && fam=6
	for i in 0 1 2 3; do
		alias=$(child_alias a "net1r$i")
		DEV_A[i]=$(alias_field "$alias" rdma_dev) IDX_A[i]=$(alias_field "$alias" gid_index)
		alias=$(child_alias b "net1r$i")
		DEV_B[i]=$(alias_field "$alias" rdma_dev) IDX_B[i]=$(alias_field "$alias" gid_index)
		if ((fam == 6)); then
			ADDR_A[i]=$(slaac_addr a "net1r$i") ADDR_B[i]=$(slaac_addr b "net1r$i")
		else
			ADDR_A[i]=$(child_addr a "net1r$i") ADDR_B[i]=$(child_addr b "net1r$i")
		fi
		assert_eq "${DEV_A[i]}/${DEV_B[i]}" "rxe$i/rxe$i" "rail $i's RDMA device in the aliases"
		note "rail $i: pod A ${ADDR_A[i]} (${DEV_A[i]} GID ${IDX_A[i]}) -> pod B ${ADDR_B[i]} (${DEV_B[i]} GID ${IDX_B[i]})"
	done
}

# bw_all_rails oob|cm TOOL [ARGS...]: TOOL (ib_write_bw, ib_send_bw) from pod A to pod B on
# the four rails at once, ARGS added on both sides; oob: the tools exchange their QP numbers and
# GIDs over the cluster network (pod B's eth0), cm: RDMA CM connects pod A's rail address to
# pod B's (-R; rdma_cm resolves its path by the pod's main table, where on flat every rail's
# connected route is the same 172.16.0.0/16, so a host route in pod A names rail i for pod B's
# address, as a job using rdma_cm on such a node pins it). Then the counters: rail i of a sent and rail i of b received at
# least that rail's data, and no rail more than 1.5 times one flow.
bw_all_rails() {
	local mode=$1 tool=$2 i rc srv=() cli=() a0 a1 b0 b1 want da db peer src=() via
	shift 2
	read -r -a a0 <<<"$(rail_bytes a tx)"
	read -r -a b0 <<<"$(rail_bytes b rx)"
	for i in 0 1 2 3; do
		src=()
		[[ $mode == cm ]] && src=(-R)
		[[ $mode == cm && $FABRIC_LAYOUT == routed6 ]] && src+=(--ipv6)
		on b ip netns exec podB timeout 120 "$tool" -d "${DEV_B[i]}" -x "${IDX_B[i]}" -s "$BW_SIZE" \
			-n "$BW_ITERS" -F -p $((BW_PORT + i)) "${src[@]}" "$@" >"/tmp/bw-srv-$i.log" 2>&1 &
		srv+=($!)
	done
	sleep 3 # the servers listen on their out-of-band ports
	for i in 0 1 2 3; do
		peer=$POD_NET_B src=()
		if [[ $mode == cm ]]; then
			peer=${ADDR_B[i]} src=(-R)
			if [[ $FABRIC_LAYOUT == flat ]]; then
				in_pod podA ip route replace "${ADDR_B[i]}" dev "net1r$i" src "${ADDR_A[i]}"
			else
				# Through rail i's router (its link-local address, from the rail's RA).
				via=$(in_pod podA ip -6 route show table all default dev "net1r$i" | awk '/via/ {print $3; exit}')
				[[ -n $via ]] || fail "pod A has no route by rail $i's router: $(in_pod podA ip -6 route show table all dev "net1r$i" | tr '\n' ';')"
				in_pod podA ip -6 route replace "${ADDR_B[i]}" via "$via" dev "net1r$i" src "${ADDR_A[i]}"
				src+=(--ipv6)
			fi
		fi
		in_pod podA timeout 120 "$tool" -d "${DEV_A[i]}" -x "${IDX_A[i]}" -s "$BW_SIZE" -n "$BW_ITERS" -F \
			-p $((BW_PORT + i)) "${src[@]}" "$@" "$peer" >"/tmp/bw-cli-$i.log" 2>&1 &
		cli+=($!)
	done
	for i in 0 1 2 3; do
		rc=0
		wait "${cli[i]}" || rc=$?
		((rc == 0)) || fail "$tool client on rail $i exited $rc: $(tail -n 6 "/tmp/bw-cli-$i.log" | tr '\n' ' ')"
		rc=0
		wait "${srv[i]}" || rc=$?
		((rc == 0)) || fail "$tool server on rail $i (host b) exited $rc: $(tail -n 6 "/tmp/bw-srv-$i.log" | tr '\n' ' ')"
		grep -qE "^ *$BW_SIZE +$BW_ITERS " "/tmp/bw-cli-$i.log" || fail "no result line from $tool on rail $i: $(cat "/tmp/bw-cli-$i.log")"
		note "rail $i: $(grep -E "^ *$BW_SIZE +$BW_ITERS " "/tmp/bw-cli-$i.log" | awk '{print $3 " MB/s peak, " $4 " MB/s average"}')"
	done
	read -r -a a1 <<<"$(rail_bytes a tx)"
	read -r -a b1 <<<"$(rail_bytes b rx)"
	want=$((BW_SIZE * BW_ITERS))
	for i in 0 1 2 3; do
		da=$((a1[i] - a0[i])) db=$((b1[i] - b0[i]))
		note "rail $i: host a rdma$i tx +$da bytes, host b rdma$i rx +$db bytes (one flow: $want)"
		((da >= want && db >= want)) || fail "rail $i carried less than its pair's $want bytes (a tx +$da, b rx +$db): the data went another way"
		((2 * da <= 3 * want && 2 * db <= 3 * want)) ||
			fail "rail $i carried more than one flow (a tx +$da, b rx +$db for $want): another rail's data went over it"
	done
}
