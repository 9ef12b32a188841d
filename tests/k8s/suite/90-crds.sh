# shellcheck shell=bash
# The examples against a real API server with the upstream CRDs (../shared/upstream/crds, the
# Network Operator's of the release tests/validate-manifests.sh names, and nv-ipam's; the node
# sees the host's root, so the path resolves): `kubectl apply --dry-run=server` (field validation Strict, kubectl's default) takes
# every example document whose kind has a CRD there, and `roce-ipvlan validate --strict`, which
# `make validate-manifests` runs offline against schemas generated from the same CRDs, agrees:
# it passes the examples, and of the known-bad manifests made only of those kinds it refuses,
# the server refuses exactly those whose fault is the schema's (an unknown field) and takes the
# ones whose fault is in what only roce-ipvlan reads (the CNI configuration, the policies'
# offers against the workloads). MPIJob, PyTorchJob and JobSet have no CRD there: their
# documents are left out here (validate-manifests checks their pod templates offline).
# They need the API server and not the node: make test runs them on the host against an API
# server of their own (tests/k8s/crd-test.sh, K8S_API_ONLY=1), make k8s-test-control on the node.
# Last in the suite: the CRDs stay installed (a CRD deleted right after it was made can hang in
# its finalizer, "storage is (re)initializing"), and the NAD CRD Multus installed becomes the
# Network Operator's (the same schema); dry runs leave no objects.

upstream_crds() { echo "$(dirname "$ROCE_REPO")/shared/upstream/crds"; }

# install_crds: apply every upstream CRD (again: each test may run alone) and wait until each is
# served; create the namespaces the examples and fixtures name (nvidia-network-operator for
# nv-ipam's pools, ml): a dry run into a missing namespace is refused for that alone.
install_crds() {
	local dir ns _
	dir=$(upstream_crds)
	[[ -d $dir ]] || fail "$dir: no upstream CRDs; ../shared/upstream/README.md says where they come from"
	kubectl apply -R -f "$dir" >/dev/null
	kubectl wait --for condition=established --timeout=60s -R -f "$dir" >/dev/null
	while read -r ns; do
		kubectl get namespace "$ns" >/dev/null 2>&1 && continue
		kubectl create namespace "$ns" >/dev/null
		# A pod is refused until its namespace's default service account exists (the controller
		# manager makes it a moment after the namespace).
		for _ in $(seq 30); do kubectl -n "$ns" get serviceaccount default >/dev/null 2>&1 && break; sleep 2; done
	done < <(sed -n 's/^  namespace: *//p' "$ROCE_REPO"/examples/*.yaml "$ROCE_REPO"/tests/validate-fixtures/*.yaml | sort -u)
	note "$(find "$dir" -name '*.yaml' | wc -l) CRDs from $dir"
}

# served FILE: FILE's documents whose kind the API server serves (the others named on stderr).
served() {
	local kinds
	kinds=$(kubectl api-resources --no-headers | awk '{print $NF}' | sort -u | tr '\n' ' ')
	awk -v kinds=" $kinds" -v file="$1" '
		function flush() { if (doc != "" && (kind == "" || index(kinds, " " kind " "))) printf "---\n%s", doc
		                   else if (doc != "") printf "  - %s: %s has no CRD here, not applied\n", file, kind > "/dev/stderr"
		                   doc = ""; kind = "" }
		/^---/ { flush(); next }
		/^kind: / { kind = $2 }
		{ doc = doc $0 "\n" }
		END { flush() }' "$1"
}

# server_dry_run FILE: `kubectl apply --dry-run=server` of FILE's served documents (none: no
# output); its output.
server_dry_run() {
	local docs
	docs=$(served "$1")
	grep -q '^kind: ' <<<"$docs" || return 0
	kubectl apply --dry-run=server --validate=strict -f - <<<"$docs" 2>&1
}

test_crds_take_every_example_and_validate_agrees() {
	install_crds
	cd "$ROCE_REPO" || fail "no $ROCE_REPO"
	local f out built n=0 files=()
	for f in examples/*.yaml; do [[ $f == examples/kustomization.yaml ]] || files+=("$f"); done
	out=$("$ROCE_IPVLAN_BIN" validate --strict "${files[@]}" 2>&1) ||
		fail "roce-ipvlan validate --strict refuses the examples: $(grep -v '^OK\|^skip' <<<"$out")"
	for f in "${files[@]}"; do
		out=$(server_dry_run "$f") || fail "the API server refuses $f (validate --strict passes it): $out"
		n=$((n + $(grep -c . <<<"$out" || true)))
	done
	note "$n objects of ${#files[@]} examples accepted (dry run)"
	# The way the examples are meant to be applied: through their kustomization.
	built=$(mktemp)
	out=$(kubectl kustomize examples >"$built" && server_dry_run "$built") ||
		fail "the API server refuses the examples' kustomize build: $out"
	rm -f "$built"
}

# A fixture refused by the schema offline ("# expect:" is a JSON Schema message) must be refused
# by the server; any other must be taken by it (its fault is in what only roce-ipvlan reads).
test_crds_refuse_what_the_generated_schemas_refuse() {
	install_crds
	cd "$ROCE_REPO" || fail "no $ROCE_REPO"
	local f k ok expect out rc schema kinds all_served checked=0
	all_served=" $(kubectl api-resources --no-headers | awk '{print $NF}' | sort -u | tr '\n' ' ') "
	for f in tests/validate-fixtures/*.yaml; do
		kinds=$(awk '/^kind: / {print $2}' "$f" | sort -u)
		ok=1
		for k in $kinds; do [[ $all_served == *" $k "* ]] || ok=0; done
		((ok)) || continue
		expect=$(sed -n 's/^# expect: //p' "$f")
		schema=0
		[[ $expect =~ (was\ unexpected|is\ not\ one\ of|is\ a\ required\ property|does\ not\ match) ]] && schema=1
		out=$(server_dry_run "$f") && rc=0 || rc=$?
		if ((schema)); then
			((rc != 0)) || fail "$f: refused offline ($expect), but the API server takes it"
			note "$f: refused by both: $(grep -o 'unknown field[^,]*' <<<"$out" | head -1)"
		else
			((rc == 0)) || fail "$f: the API server refuses it, offline only roce-ipvlan validate does ($expect): $out"
		fi
		checked=$((checked + 1))
	done
	((checked >= 10)) || fail "only $checked fixtures are made of kinds with CRDs here, expected at least 10"
	note "$checked fixtures: the server refuses the schema's faults and takes the rest"
}
