# shellcheck shell=bash
# Concurrency (docs/failure-modes.md#concurrency): CONC_PODS pods (default 32) x 4 rails, every
# ADD at once, then every CHECK at once, then every DEL at once; CONC_ROUNDS rounds (default 2).
# Zero failures, zero leaks, and within each pod one routing table per child, numbered
# 10000 + the child's ifindex. All attachments share one flat host-local range (the A100
# layout), so host-local's own lock is exercised too, and so are roce-ipvlan's own (lock.rs:
# per attachment, and per pod around the pod-wide sysctl steps).

CONC_RAILS="rdma0 rdma1 rdma2 rdma3"

# conc_all CMD: run CMD for every pod and rail in the background at once; each writes
# /tmp/conc/<pod>.<n>.{out,rc}; fails with the first errors when any exited non-zero
conc_all() {
	local cmd=$1 p n rail conf bad f
	for p in $(seq "$CONC_PODS"); do
		n=1
		for rail in $CONC_RAILS; do
			conf=/tmp/conc/conf.$n
			[[ $cmd == ADD ]] || conf=/tmp/conc/pod$p.$n.prev
			(
				rc=0
				CNI_COMMAND=$cmd CNI_CONTAINERID=conc-$p CNI_NETNS=/run/netns/conc$p CNI_IFNAME=net$n \
					CNI_PATH=$CNI_PATH "$CNI_BIN_DIR/roce-ipvlan" <"$conf" >"/tmp/conc/pod$p.$n.out" \
					2>"/tmp/conc/pod$p.$n.err" || rc=$?
				echo "$rc" >"/tmp/conc/pod$p.$n.rc"
			) &
			n=$((n + 1))
		done
	done
	wait
	bad=$(grep -lv '^0$' /tmp/conc/*.rc || true)
	if [[ -n $bad ]]; then
		f=$(head -n1 <<<"$bad")
		fail "$cmd failed for $(wc -l <<<"$bad") attachments, e.g. ${f%.rc}: $(cat "${f%.rc}.out" "${f%.rc}.err" | head -c 600)"
	fi
	# Every attachment's status is there and says 0: an empty or missing status file is no
	# line for the grep above to find, not a success.
	local ok
	ok=$(cat /tmp/conc/*.rc 2>/dev/null | grep -cx 0) || ok=0
	((ok == CONC_PODS * $(wc -w <<<"$CONC_RAILS"))) ||
		fail "$cmd: $ok of $((CONC_PODS * $(wc -w <<<"$CONC_RAILS"))) attachments reported exit status 0"
}

# Two ADDs into one pod at once; the first fails after the pod-wide sysctl step (its GID never
# appears: rdma.device of another rail), the second works. The second relies on the pod-wide
# all.rp_filter=0 the first wrote (it found 0 there, so it saved 0): the first's undo must not
# put back the 1 it found while the second stands.
test_concurrency_failed_add_keeps_a_concurrent_adds_pod_wide_sysctl() {
	require_plugin
	local other pid1 rc1=0 rc2=0
	other=$(rail_rdma_dev rdma0)
	new_pod cpw
	in_pod cpw sysctl -qw net.ipv4.conf.all.rp_filter=1
	# Generous limits: the test must not depend on how fast a loaded TCG host runs the second
	# ADD, which waits for the first's pod lock.
	roce_conf /tmp/cpw-fail.conf cpw rdma1 1.0.0 10.9.81.0/24 \
		"{\"rdma\": {\"device\": \"$other\", \"gidTimeoutMs\": 15000}, \"timeouts\": {\"totalMs\": 30000}}"
	roce_conf /tmp/cpw-ok.conf cpw rdma2 1.0.0 10.9.81.0/24 '{"timeouts": {"totalMs": 60000}}'
	cni_exec ADD /tmp/cpw-fail.conf /run/netns/cpw net1 cpw >/tmp/cpw-fail.out 2>&1 &
	pid1=$!
	# The second starts once the first has written the pod-wide value; the first then waits
	# 15 s for its GID, while the second needs a second or two.
	for _ in $(seq 300); do
		[[ $(in_pod cpw sysctl -n net.ipv4.conf.all.rp_filter) == 0 ]] && break
		kill -0 "$pid1" 2>/dev/null || fail "the first ADD ended before its sysctl step: $(cat /tmp/cpw-fail.out)"
		sleep 0.1
	done
	# A wait that ran out proves no overlap: the second ADD must start after the first's write.
	[[ $(in_pod cpw sysctl -n net.ipv4.conf.all.rp_filter) == 0 ]] ||
		fail "the first ADD did not write the pod-wide rp_filter=0 within 30 s: $(cat /tmp/cpw-fail.out)"
	cni_exec ADD /tmp/cpw-ok.conf /run/netns/cpw net2 cpw >/tmp/cpw-ok.out 2>/tmp/cpw-ok.err || rc2=$?
	wait "$pid1" || rc1=$?
	assert_eq "$rc2" 0 "the second ADD: $(cat /tmp/cpw-ok.out /tmp/cpw-ok.err)"
	((rc1 != 0)) || fail "the first ADD should have failed (GID on another rail)"
	assert_match "$(cat /tmp/cpw-fail.out)" '"code":104' "the first ADD's error"
	assert_eq "$(pod_links cpw)" "net2 " "links in the pod"
	assert_eq "$(in_pod cpw sysctl -n net.ipv4.conf.all.rp_filter)" 0 \
		"pod-wide rp_filter under the second attachment after the first ADD's undo"
	assert_ok cni_exec DEL /tmp/cpw-ok.conf /run/netns/cpw net2 cpw
	assert_eq "$(host_local_ips cpw)" "" "host-local allocations after DEL"
}

# The runtime gave up on an ADD (its IPAM is slow) and sends DEL while the orphaned ADD still
# runs. The DEL waits for it, then removes what it built: nothing is left, rather than a DEL
# that reports success and an ADD that completes the attachment after it.
test_concurrency_del_waits_for_its_orphaned_add() {
	require_plugin
	fake_ipam ipam-orphan late
	new_pod corph
	roce_conf /tmp/corph.conf corph rdma3 1.0.0 10.9.82.0/24 \
		'{"ipam": {"type": "ipam-orphan", "subnet": "10.9.82.0/24"}}'
	local add del rc_add=0 rc_del=0
	cni_exec ADD /tmp/corph.conf /run/netns/corph net1 orphan >/tmp/corph-add.out 2>&1 &
	add=$!
	for _ in $(seq 300); do
		[[ -s /run/fake-ipam/ipam-orphan.pid ]] && break
		sleep 0.1
	done
	[[ -s /run/fake-ipam/ipam-orphan.pid ]] || fail "the ADD never reached its IPAM: $(cat /tmp/corph-add.out)"
	cni_exec DEL /tmp/corph.conf /run/netns/corph net1 orphan >/tmp/corph-del.out 2>&1 &
	del=$!
	until grep -q 'waiting for it' /tmp/corph-del.out; do
		kill -0 "$del" 2>/dev/null ||
			fail "the DEL finished while its ADD was still running: $(cat /tmp/corph-del.out)"
		sleep 0.1
	done
	echo go 1<>/run/fake-ipam/ipam-orphan.go # the IPAM allocates and the ADD goes on
	wait "$add" || rc_add=$?
	wait "$del" || rc_del=$?
	assert_eq "$rc_add" 0 "the orphaned ADD: $(cat /tmp/corph-add.out)"
	assert_eq "$rc_del" 0 "the DEL: $(cat /tmp/corph-del.out)"
	assert_eq "$(pod_links corph)" "" "links left after the DEL"
	assert_eq "$(pod_rules corph)" "" "rules left after the DEL"
	assert_eq "$(host_local_ips corph)" "" "host-local allocations after the DEL"
}

# conc_leftovers: what a round could leave that host_snapshot does not show: each rail's RoCE
# GIDs (a child's stay until its netdev is gone) and the plugin's pod records. With it, a round
# ends where it began, so a second round proves nothing more (make test runs one, CONC_ROUNDS).
conc_leftovers() {
	local rail n
	for rail in $CONC_RAILS; do
		n=$(cat /sys/class/infiniband/"$(rail_rdma_dev "$rail")"/ports/1/gids/* |
			grep -vc '^0000:0000:0000:0000:0000:0000:0000:0000$' || true)
		echo "$rail: $n GIDs"
	done
	if [[ -d /run/roce-ipvlan/attachments ]]; then find /run/roce-ipvlan/attachments -type f | sort; fi
}

test_concurrency_pods_by_rails_rounds() {
	require_plugin
	CONC_PODS=${CONC_PODS:-32} CONC_ROUNDS=${CONC_ROUNDS:-2}
	local round p n rail start t_add t_check t_del links rules tables want ip all_ips gid dev conf
	local -A rdev rindex
	local -a rails
	read -r -a rails <<<"$CONC_RAILS"
	local re
	mkdir -p /tmp/conc
	n=1
	for rail in $CONC_RAILS; do
		roce_conf "/tmp/conc/conf.$n" conc "$rail" 1.0.0 10.9.80.0/24
		jq -c . "/tmp/conc/conf.$n" >"/tmp/conc/conf.$n.tmp" && mv "/tmp/conc/conf.$n.tmp" "/tmp/conc/conf.$n"
		rdev[$rail]=$(rail_rdma_dev "$rail")
		rindex[$rail]=$(cat "/sys/class/net/$rail/ifindex")
		n=$((n + 1))
	done
	host_snapshot >/tmp/conc/host.before
	conc_leftovers >/tmp/conc/left.before
	for round in $(seq "$CONC_ROUNDS"); do
		rm -f /tmp/conc/pod*
		for p in $(seq "$CONC_PODS"); do new_pod "conc$p"; done

		start=$SECONDS
		conc_all ADD
		t_add=$((SECONDS - start))
		all_ips=$(cat /tmp/conc/pod*.out | jq -r '.ips[0].address' | sort)
		assert_eq "$(wc -l <<<"$all_ips")" $((CONC_PODS * 4)) "round $round: addresses handed out"
		assert_eq "$(uniq -d <<<"$all_ips")" "" "round $round: an address handed out twice"
		assert_eq "$(host_local_ips conc | wc -l)" $((CONC_PODS * 4)) "round $round: host-local allocations"
		# One jq over every result: "pod n address gid rdmaDevice" per attachment.
		jq -r '[input_filename, (.ips[0].address | sub("/.*"; "")), .roce.gid, .roce.rdmaDevice] | @tsv' \
			/tmp/conc/pod*.out | sed -E 's|^/tmp/conc/pod([0-9]+)\.([0-9]+)\.out|\1 \2|' >/tmp/conc/results
		local -A addr
		while read -r p n ip gid dev; do
			rail=${rails[n - 1]}
			assert_eq "$gid" "::ffff:$ip" "round $round: conc$p net$n GID"
			assert_eq "$dev" "${rdev[$rail]}" "round $round: conc$p net$n RDMA device"
			addr[$p.$n]=$ip
		done </tmp/conc/results
		for p in $(seq "$CONC_PODS"); do
			# Each child: IPvlan L2 on its own rail, a rule for its address into table
			# 10000 + its ifindex; no two children of a pod share a table.
			links=$(ip -n "conc$p" -o -d link show)
			rules=$(ip -n "conc$p" -4 rule show)
			tables=""
			n=1
			for rail in $CONC_RAILS; do
				local line idx
				line=$(grep -E "^[0-9]+: net$n@" <<<"$links") || fail "round $round: conc$p has no net$n"
				assert_match "$line" 'ipvlan +mode l2' "round $round: conc$p net$n is IPvlan L2"
				assert_match "$line" "net$n@if${rindex[$rail]}:" "round $round: conc$p net$n is on $rail"
				idx=${line%%:*}
				ip=${addr[$p.$n]}
				want=$((10000 + idx))
				re="(^|"$'\n'")1000:[[:space:]]+from ${ip//./\\.} lookup ${want}[[:space:]]*("$'\n'"|\$)"
				[[ $rules =~ $re ]] ||
					fail "round $round: conc$p has no rule 'from $ip lookup $want': $rules"
				tables+="$want "
				# CHECK's prevResult, without a jq per attachment
				conf=$(<"/tmp/conc/conf.$n")
				printf '%s,"prevResult":%s}' "${conf%\}}" "$(<"/tmp/conc/pod$p.$n.out")" >"/tmp/conc/pod$p.$n.prev"
				n=$((n + 1))
			done
			assert_eq "$(tr ' ' '\n' <<<"$tables" | sed '/^$/d' | sort | uniq -d)" "" "round $round: conc$p duplicate tables ($tables)"
			assert_eq "$(grep -cE 'lookup 1[0-9]{4}' <<<"$rules")" 4 "round $round: conc$p source rules"
		done

		rm -f /tmp/conc/*.rc
		start=$SECONDS
		conc_all CHECK
		t_check=$((SECONDS - start))

		rm -f /tmp/conc/*.rc
		start=$SECONDS
		conc_all DEL
		t_del=$((SECONDS - start))
		assert_eq "$(host_local_ips conc)" "" "round $round: host-local allocations after DEL"
		for p in $(seq "$CONC_PODS"); do
			assert_eq "$(count_lines -v ': lo:' ip -n "conc$p" -o link show)" 0 "round $round: links left in conc$p"
			assert_eq "$(count_lines 'lookup 1[0-9]{4}' ip -n "conc$p" rule show)" 0 "round $round: rules left in conc$p"
			ip netns del "conc$p"
		done
		assert_eq "$(host_snapshot | diff /tmp/conc/host.before - || true)" "" "round $round: the host changed"
		# The GIDs go with their children a moment after the DEL (the kernel's netdev events).
		for _ in $(seq 60); do
			conc_leftovers | cmp -s /tmp/conc/left.before - && break
			sleep 0.5
		done
		assert_eq "$(conc_leftovers | diff /tmp/conc/left.before - || true)" "" \
			"round $round: GIDs or pod records left"
		note "round $round: $CONC_PODS pods x 4 rails: ADD ${t_add}s, CHECK ${t_check}s, DEL ${t_del}s, no failure, nothing left"
	done
}
