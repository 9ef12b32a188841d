# shellcheck shell=bash
# The installer's /metrics (docs/deploy.md#metrics), scraped from the node as Prometheus would
# reach the hostNetwork port: the attachments and GID entries of pods that exist, the table
# filling as pods attach, and a broken NAD's failed ADDs counted by network and code. One test,
# three pods, to keep the tier's time.

METRICS_URL=http://127.0.0.1:9740

scrape() { curl -sS --max-time 20 "$METRICS_URL/metrics"; }

# metric TEXT SERIES: the value of the sample whose name and labels are SERIES exactly; 0 when
# it has none.
metric() { awk -v s="$2" '$1 == s {print $2; f=1} END {if (!f) print 0}' <<<"$1"; }

rail_series() { # NAME RAIL: the series of a per-rail gauge (labels as the exporter orders them)
	local dev
	dev=$(rail_rdma_dev "$2")
	printf '%s{rail="%s",device="%s",port="1"}' "$1" "$2" "$dev"
}

# metrics_reach SERIES MIN: a scrape shows SERIES at MIN or more.
metrics_reach() {
	local v
	v=$(metric "$(scrape)" "$1")
	awk -v v="$v" -v m="$2" 'BEGIN {exit !(v + 0 >= m + 0)}'
}

# metrics_at SERIES VALUE: a scrape shows SERIES at VALUE exactly.
metrics_at() { [[ $(metric "$(scrape)" "$1") == "$2" ]]; }

test_metrics_show_attachments_gid_tables_and_failed_adds() {
	local text used0 used1 used2 att0 failed
	assert_eq "$(curl -sS --max-time 10 "$METRICS_URL/healthz")" ok "/healthz"
	text=$(scrape) || fail "cannot scrape $METRICS_URL/metrics from the node"
	assert_match "$text" $'# TYPE roce_ipvlan_rail_gid_entries_used gauge' "the exposition's TYPE lines"
	assert_eq "$(metric "$text" "$(rail_series roce_ipvlan_rail_port_active rdma0)")" 1 "rdma0's port ACTIVE"
	used0=$(metric "$text" "$(rail_series roce_ipvlan_rail_gid_entries_used rdma0)")
	att0=$(metric "$text" 'roce_ipvlan_rail_attachments{rail="rdma0"}')
	note "before: rdma0 $used0 GID entries used, $att0 children"

	# One pod on rdma0 and rdma1, then a second on rdma0: the table fills with each. On the
	# OFED view the node sees none of the pods' GIDs: their entries come from the records.
	rail_nad metrics
	testpod m1 "$(networks_on_rails metrics rdma0 rdma1)"
	wait_pod_ready m1 300 || fail "pod m1 not Ready"
	wait_for 30 "rdma0's children in /metrics to count m1" \
		metrics_reach 'roce_ipvlan_rail_attachments{rail="rdma0"}' $((att0 + 1)) ||
		fail "/metrics does not count m1's child on rdma0"
	text=$(scrape)
	used1=$(metric "$text" "$(rail_series roce_ipvlan_rail_gid_entries_used rdma0)")
	(($(metric "$text" 'roce_ipvlan_rail_attachments{rail="rdma1"}') >= 1)) || fail "/metrics counts no child on rdma1 with m1"
	((used1 > used0)) || fail "rdma0's GID entries used: $used0 before m1, $used1 with it"
	testpod m2 "$(networks_on_rails metrics rdma0)"
	wait_pod_ready m2 300 || fail "pod m2 not Ready"
	wait_for 30 "rdma0's children in /metrics to count m2" \
		metrics_reach 'roce_ipvlan_rail_attachments{rail="rdma0"}' $((att0 + 2)) ||
		fail "/metrics does not count m2's child on rdma0"
	text=$(scrape)
	used2=$(metric "$text" "$(rail_series roce_ipvlan_rail_gid_entries_used rdma0)")
	((used2 > used1)) || fail "rdma0's GID entries used: $used1 with m1, $used2 with m2 too"
	note "rdma0: $used0 -> $used1 -> $used2 GID entries used, free $(metric "$text" "$(rail_series roce_ipvlan_rail_gid_entries_free rdma0)")"
	assert_match "$(metric "$text" 'roce_ipvlan_cni_command_duration_seconds_count{command="ADD",network="metrics",code="0"}')" \
		'^[3-9]$|^[1-9][0-9]+$' "successful ADDs of the NAD metrics (3 children)"

	# A NAD without a rail (as 50-broken.sh): its ADDs fail, counted under its name and code
	# (from what was counted before: 50-broken.sh's failures are on the node's counts too).
	local series='roce_ipvlan_cni_command_duration_seconds_count{command="ADD",network="broken",code="7"}' failed0
	failed0=$(metric "$(scrape)" "$series")
	nad broken '{"cniVersion": "1.0.0", "name": "broken", "type": "roce-ipvlan", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.57.0.0/24"}]]}}'
	testpod broken1 '[{"name": "broken", "interface": "net1"}]'
	wait_for 300 "a failed ADD of the NAD broken in /metrics" \
		metrics_reach "$series" $((failed0 + 1)) ||
		fail "/metrics counts no new failed ADD of the NAD broken: $(scrape | grep 'network="broken"' | head -n 5)"
	failed=$(metric "$(scrape)" "$series")
	note "the NAD broken: $failed0 -> $failed failed ADDs (code 7)"
	kubectl delete pod broken1 m2 --wait=true --timeout=120s >/dev/null

	# m2 gone: its child is no longer counted.
	wait_for 30 "rdma0's children in /metrics without m2" \
		metrics_at 'roce_ipvlan_rail_attachments{rail="rdma0"}' $((att0 + 1)) ||
		fail "/metrics still counts m2's child after its deletion"
}
