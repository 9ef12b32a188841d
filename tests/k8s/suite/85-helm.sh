# shellcheck shell=bash
# The Helm chart (charts/roce-ipvlan) on the node with a real helm (tests/helm/build.sh; on the
# node's PATH): a user switching from the kustomize install to the chart, then removing it as
# docs/deploy.md#uninstall says. The node runs the kustomize install (node.sh); this test
# deletes it, installs the chart with the node's image, runs `helm test` (the chart's hook: the
# installer's `ready` answer), upgrades it to mode=uninstall (a changed value, a new pod
# template) and waits for that rollout, uninstalls it and checks it left nothing, then puts the
# kustomize install back exactly as node.sh made it (`kubectl apply -k` of the same folder),
# so the files after this one see the cluster as before; the EXIT trap does that too when a
# check fails half-way.
# A run may install something else (tests/k8s/release-test.sh: a release folder's): HELM_CHART
# (default the chart folder; or a chart package), HELM_IMAGE (default the kustomize install's,
# the node's localhost/roce-ipvlan:<version>), HELM_BIN (the binary that image installs, default
# ROCE_IPVLAN_BIN), HELM_SET (more --set, comma-separated: a broken value).

HELM_RELEASE=roce-ipvlan
HELM_RELEASE_NS=default # the chart renders the installer's namespace (namespace.create)
HELM_NS=roce-ipvlan
KUSTOMIZE_INSTALL=$ROCE_REPO/tests/k8s/manifests/installer

# helm with its own state on the node's tmpfs (the VM sees the host's root: not the host's ~).
helm() { HELM_CACHE_HOME=/run/helm/cache HELM_CONFIG_HOME=/run/helm/config HELM_DATA_HOME=/run/helm/data command helm "$@"; }

installer_ds() { kubectl -n "$HELM_NS" get ds roce-ipvlan-installer -o json 2>/dev/null; }
ds_image() { installer_ds | jq -r '.spec.template.spec.containers[] | select(.name == "install") | .image'; }
installer_pods() { kubectl get pods -A -l app.kubernetes.io/component=cni-installer -o name 2>/dev/null; }
rollout_done() { kubectl -n "$HELM_NS" rollout status ds/roce-ipvlan-installer --timeout="${1:-120}s" >/dev/null; }

# restore_kustomize_install: what node.sh applied, applied again once the chart's release and
# namespace are gone; waits until the DaemonSet is Ready. The EXIT trap's, then the suite's
# cleanup.
restore_kustomize_install() {
	if helm status "$HELM_RELEASE" -n "$HELM_RELEASE_NS" >/dev/null 2>&1; then
		helm uninstall "$HELM_RELEASE" -n "$HELM_RELEASE_NS" --timeout 120s >/dev/null 2>&1 || true
	fi
	# A namespace still terminating refuses new objects.
	wait_for 120 "namespace $HELM_NS to be gone" bash -c "! kubectl get namespace $HELM_NS >/dev/null 2>&1" || true
	kubectl apply -k "$KUSTOMIZE_INSTALL" >/dev/null
	rollout_done 180
}

# helm_objects: "KIND NAMESPACE NAME" of each object of the release's manifest (NAMESPACE "-"
# for cluster-scoped ones).
helm_objects() {
	helm get manifest "$HELM_RELEASE" -n "$HELM_RELEASE_NS" |
		python3 -c '
import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d:
        print(d["kind"], d["metadata"].get("namespace", "-"), d["metadata"]["name"])'
}

test_helm_chart_installs_tests_upgrades_and_uninstalls() {
	local chart=${HELM_CHART:-$ROCE_REPO/charts/roce-ipvlan} plugin=${HELM_BIN:-$ROCE_IPVLAN_BIN}
	local image helm_image t0=$SECONDS out objs kind ns name left=()
	trap 'restore_kustomize_install; cleanup_k8s' EXIT
	command -v helm >/dev/null || fail "no helm on the node's PATH (tests/helm/build.sh, copied by tests/k8s/build.sh)"
	note "$(helm version --short)"
	image=$(ds_image)
	[[ $image == localhost/roce-ipvlan:* ]] || fail "the kustomize install's image is '$image', expected the node's localhost/roce-ipvlan:<version>"
	helm_image=${HELM_IMAGE:-$image}
	note "chart $chart, image $helm_image"

	# 1. The kustomize install out of the way, as a user switching to the chart does; a plain
	#    delete leaves the plugin on the node (docs/deploy.md#uninstall): removed here by hand,
	#    so that the chart's install is what puts it back.
	kubectl delete -k "$KUSTOMIZE_INSTALL" --wait=true --timeout=120s >/dev/null ||
		fail "kubectl delete -k $KUSTOMIZE_INSTALL did not finish in 120 s"
	[[ -z $(installer_pods) ]] || fail "installer pods left after the kustomize install's delete: $(installer_pods)"
	[[ -x /opt/cni/bin/roce-ipvlan ]] || fail "kubectl delete -k removed /opt/cni/bin/roce-ipvlan; docs/deploy.md says it stays"
	rm -f /opt/cni/bin/roce-ipvlan
	note "kustomize install deleted ($((SECONDS - t0)) s)"

	# 2. helm install, with the node's image.
	out=$(helm install "$HELM_RELEASE" "$chart" -n "$HELM_RELEASE_NS" \
		--set namespace.create=true --set namespace.name="$HELM_NS" \
		--set image.repository="${helm_image%:*}" --set image.tag="${helm_image##*:}" ${HELM_SET:+--set "$HELM_SET"} 2>&1) ||
		fail "helm install $chart: $out"
	grep -q 'helm test roce-ipvlan' <<<"$out" || fail "helm install printed no NOTES.txt: $out"
	rollout_done 120 || fail "the chart's DaemonSet did not become Ready in 120 s: $(kubectl -n "$HELM_NS" get pods -o wide 2>&1)"
	assert_eq "$(installer_ds | jq -r '.metadata.labels["app.kubernetes.io/instance"] + " " + .metadata.labels["app.kubernetes.io/managed-by"]')" \
		"$HELM_RELEASE Helm" "the DaemonSet's instance and managed-by labels"
	[[ -x /opt/cni/bin/roce-ipvlan ]] || fail "the chart's installer is Ready but /opt/cni/bin/roce-ipvlan is missing"
	assert_eq "$(sha256sum </opt/cni/bin/roce-ipvlan)" "$(sha256sum <"$plugin")" \
		"/opt/cni/bin/roce-ipvlan is the image's binary ($plugin)"
	note "helm install: DaemonSet Ready, plugin in place ($((SECONDS - t0)) s)"

	# 3. helm test: the hook Pod's `ready` on the node must succeed.
	out=$(helm test "$HELM_RELEASE" -n "$HELM_RELEASE_NS" --timeout 120s 2>&1) ||
		fail "helm test failed: $out; $(kubectl -n "$HELM_NS" logs roce-ipvlan-test-ready 2>&1 | tail -n 5)"
	if ! grep -Eq 'TEST SUITE: +roce-ipvlan-test-ready' <<<"$out" || ! grep -Eq 'Phase: +Succeeded' <<<"$out"; then
		fail "helm test ran no roce-ipvlan-test-ready to success: $out"
	fi
	note "helm test passed ($((SECONDS - t0)) s)"

	# 4. helm upgrade to uninstall mode (docs/deploy.md#uninstall, step 2): a new pod template,
	#    rolled out; Ready once the plugin is gone from the node.
	out=$(helm upgrade "$HELM_RELEASE" "$chart" -n "$HELM_RELEASE_NS" --reuse-values --set mode=uninstall 2>&1) ||
		fail "helm upgrade --set mode=uninstall: $out"
	rollout_done 120 || fail "the rollout to mode=uninstall did not finish in 120 s: $(kubectl -n "$HELM_NS" get pods -o wide 2>&1)"
	assert_eq "$(installer_ds | jq -r '.spec.template.spec.containers[] | select(.name == "install") | .command | index("uninstall") != null')" \
		true "the DaemonSet's install container runs uninstall after the upgrade"
	[[ ! -e /opt/cni/bin/roce-ipvlan ]] || fail "mode=uninstall rolled out, but /opt/cni/bin/roce-ipvlan is still there"
	assert_eq "$(helm history "$HELM_RELEASE" -n "$HELM_RELEASE_NS" -o json | jq -r 'map("\(.revision):\(.status)") | join(" ")')" \
		"1:superseded 2:deployed" "helm history"
	note "helm upgrade mode=uninstall rolled out, plugin removed ($((SECONDS - t0)) s)"

	# 5. helm uninstall: nothing of the release left in the cluster, and the plugin stays off
	#    the node.
	objs=$(helm_objects)
	out=$(helm uninstall "$HELM_RELEASE" -n "$HELM_RELEASE_NS" --wait --timeout 120s 2>&1) || fail "helm uninstall: $out"
	wait_for 120 "namespace $HELM_NS to be gone" bash -c "! kubectl get namespace $HELM_NS >/dev/null 2>&1" ||
		fail "namespace $HELM_NS still there 120 s after helm uninstall"
	while read -r kind ns name; do
		if [[ $ns == - ]]; then
			kubectl get "$kind" "$name" >/dev/null 2>&1 && left+=("$kind/$name")
		else
			kubectl get "$kind" "$name" -n "$ns" >/dev/null 2>&1 && left+=("$kind/$ns/$name")
		fi
	done <<<"$objs"
	((${#left[@]} == 0)) || fail "helm uninstall left ${left[*]}"
	[[ -z $(installer_pods) ]] || fail "installer pods left after helm uninstall: $(installer_pods)"
	[[ -z $(helm list -A -q) ]] || fail "helm still lists releases: $(helm list -A -q)"
	[[ -z $(kubectl get secrets -A -l owner=helm -o name) ]] || fail "Helm's release records left: $(kubectl get secrets -A -l owner=helm -o name)"
	[[ ! -e /opt/cni/bin/roce-ipvlan ]] || fail "/opt/cni/bin/roce-ipvlan came back after helm uninstall"
	note "helm uninstall: none of the $(grep -c . <<<"$objs") objects left ($((SECONDS - t0)) s)"

	# 6. The kustomize install back, as node.sh made it.
	trap cleanup_k8s EXIT
	restore_kustomize_install || fail "the kustomize install did not come back Ready"
	assert_eq "$(ds_image)" "$image" "the restored DaemonSet's image"
	[[ -x /opt/cni/bin/roce-ipvlan ]] || fail "the kustomize install is back but /opt/cni/bin/roce-ipvlan is missing"
	note "kustomize install restored; $((SECONDS - t0)) s in all"
}
