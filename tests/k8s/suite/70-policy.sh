# shellcheck shell=bash
# The admission policies of deploy/base/admission-policy.yaml on the real API server: with the
# installer's own token, taken from its pod on this node, only the roce-ipvlan.io/gids
# annotation of a pod on this node may change; and nobody else may write that annotation. Each
# test then removes the policy's binding and sees the same request go through, so a refusal
# that came from anything but the policy (RBAC, a malformed patch) fails the test; the binding
# is put back before the test ends.

GHOST_NODE=roce-ghost # a Node object without a kubelet: pods bound to another node

# The installer pod's projected token and CA as the kubelet wrote them for its annotate container.
installer_volume() {
	local uid
	uid=$(kubectl -n roce-ipvlan get pods -l app.kubernetes.io/component=cni-installer \
		--field-selector "spec.nodeName=$K8S_NODE" -o jsonpath='{.items[0].metadata.uid}')
	[[ -n $uid ]] || { echo "no installer pod on $K8S_NODE" >&2; return 1; }
	echo "/var/lib/kubelet/pods/$uid/volumes/kubernetes.io~projected/token"
}

# as_token TOKEN_FILE METHOD PATH CONTENT_TYPE BODY: sends the request as the annotator does
# (bearer token, the cluster's CA); prints the HTTP status, the answer's message in $K8S_LOGS/answer.
as_token() {
	local vol
	vol=$(installer_volume) || return 1
	curl -sS -o "$K8S_LOGS/answer" -w '%{http_code}' --cacert "$vol/ca.crt" \
		-H "Authorization: Bearer $(cat "$1")" -H "Content-Type: $4" -X "$2" --data "$5" \
		"https://$K8S_NODE_IP:443$3"
}

# patch_as_installer POD BODY [CONTENT_TYPE]: a PATCH of pod POD (namespace default) with the
# installer's token; prints the HTTP status.
patch_as_installer() {
	as_token "$(installer_volume)/token" PATCH "/api/v1/namespaces/default/pods/$1" \
		"${3:-application/merge-patch+json}" "$2"
}

answer() { jq -r '.message // .' "$K8S_LOGS/answer" 2>/dev/null || cat "$K8S_LOGS/answer"; }

# refused POD BODY WHAT [CONTENT_TYPE]: the installer's patch is refused by the policy, by name.
refused() {
	local code
	code=$(patch_as_installer "$1" "$2" "${4:-}")
	[[ $code == 403 && $(answer) == *"ValidatingAdmissionPolicy 'roce-ipvlan-installer-own-node'"* ]] ||
		fail "$3: HTTP $code ($(answer)), expected 403 from ValidatingAdmissionPolicy roce-ipvlan-installer-own-node"
	note "$3: 403 $(answer | sed 's/.*denied request: //' | cut -c1-120)"
}

accepted() { # POD BODY WHAT
	local code
	code=$(patch_as_installer "$1" "$2")
	[[ $code == 200 ]] || fail "$3: HTTP $code ($(answer)), expected 200"
}

# plain_pod NAME NODE: a pod bound to NODE (no scheduler), without attachments.
plain_pod() {
	kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: default
  labels: { app: policy-test }
spec:
  nodeName: $2
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: $TESTPOD_IMAGE
      imagePullPolicy: IfNotPresent
      command: ["sleep", "infinity"]
YAML
}

ghost_node() {
	kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: $GHOST_NODE
  labels: { roce-ipvlan.test/ghost: "true" }
YAML
}

# without_binding NAME WHAT CMD... : deletes the policy's binding, waits up to 60 s for CMD to
# succeed (the API server learns of the deletion from an informer), then applies the binding
# again; fails when CMD never succeeded.
without_binding() {
	local name=$1 what=$2 rc=0
	shift 2
	kubectl get validatingadmissionpolicybinding "$name" -o json |
		jq 'del(.metadata.uid, .metadata.resourceVersion, .metadata.creationTimestamp, .metadata.generation, .metadata.managedFields, .status)' \
			>"$K8S_LOGS/binding-$name.json"
	kubectl delete validatingadmissionpolicybinding "$name" >/dev/null
	wait_for 60 "$what without the binding $name" "$@" || rc=$?
	kubectl apply -f "$K8S_LOGS/binding-$name.json" >/dev/null
	return "$rc"
}

status_is() { # CODE POD BODY: the installer's patch answers CODE (no failure, for wait_for)
	[[ $(patch_as_installer "$2" "$3") == "$1" ]]
}

LABEL_PATCH='{"metadata": {"labels": {"app": "hijacked"}}}'
unconfined() { # the patches only the policy refuses pass
	status_is 200 own "$LABEL_PATCH" && status_is 200 ghost '{"metadata": {"annotations": {"roce-ipvlan.io/gids": "[]"}}}'
}

forge() { kubectl annotate --overwrite pod own "roce-ipvlan.io/gids=$1" >/dev/null 2>&1; } # VALUE, as the admin

# Whether the policy is enforced again, each try with a value of its own: a patch that changes
# nothing passes any policy, so a fixed value that got through once (before the restored binding
# took effect) would pass every later try.
label_refused() { status_is 403 own "{\"metadata\": {\"labels\": {\"app\": \"again-$(date +%s%N)\"}}}"; }
forge_refused() { ! forge "[$(date +%s%N)]"; }

test_the_installers_token_changes_only_gids_of_its_nodes_pods() {
	local tok vol extra code
	vol=$(installer_volume) || fail "cannot find the installer's pod on $K8S_NODE"
	tok=$vol/token
	[[ -s $tok ]] || fail "no token in the installer's projected volume ($tok)"
	# The token names the installer's pod and its node, which the policy holds it to.
	code=$(as_token "$tok" POST /apis/authentication.k8s.io/v1/selfsubjectreviews application/json \
		'{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}')
	extra=$(jq -c '.status.userInfo.extra' "$K8S_LOGS/answer")
	note "the token's user: $(jq -r '.status.userInfo.username' "$K8S_LOGS/answer"), extra $extra"
	assert_eq "$(jq -r '.status.userInfo.extra["authentication.kubernetes.io/node-name"][0]' "$K8S_LOGS/answer")" \
		"$K8S_NODE" "the installer token's node (SelfSubjectReview HTTP $code)"

	plain_pod own "$K8S_NODE"
	ghost_node
	plain_pod ghost "$GHOST_NODE"
	local uid
	uid=$(kubectl get pod own -o jsonpath='{.metadata.uid}')

	# What the annotator does: set the annotation under the pod's UID, and remove it.
	accepted own "{\"metadata\": {\"uid\": \"$uid\", \"annotations\": {\"roce-ipvlan.io/gids\": \"[]\"}}}" \
		"the GID annotation of a pod on the installer's node"
	assert_eq "$(kubectl get pod own -o jsonpath='{.metadata.annotations.roce-ipvlan\.io/gids}')" "[]" "own's annotation"
	accepted own '{"metadata": {"annotations": {"roce-ipvlan.io/gids": null}}}' "removing it"

	refused own '{"metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": "rdma-rail-0"}}}' "another annotation"
	refused own '{"metadata": {"annotations": {"roce-ipvlan.io/gids": "[]", "x": "y"}}}' "the GID annotation with another one"
	refused own "$LABEL_PATCH" "a label"
	refused own '{"metadata": {"labels": {"extra": "label"}}}' "a new label"
	refused own '{"spec": {"activeDeadlineSeconds": 1}}' "spec.activeDeadlineSeconds (the kubelet would kill the pod)"
	refused own '{"spec": {"containers": [{"name": "main", "image": "registry.example.com/evil:1"}]}}' \
		"the container's image (strategic merge patch)" application/strategic-merge-patch+json
	refused own "{\"metadata\": {\"ownerReferences\": [{\"apiVersion\": \"v1\", \"kind\": \"Node\", \"name\": \"$K8S_NODE\", \"uid\": \"$(kubectl get node "$K8S_NODE" -o jsonpath='{.metadata.uid}')\"}]}}" \
		"ownerReferences (the garbage collector would delete the pod with its owner)"
	refused own '{"metadata": {"finalizers": ["example.com/stuck"]}}' "a finalizer"
	refused ghost '{"metadata": {"annotations": {"roce-ipvlan.io/gids": "[]"}}}' \
		"the GID annotation of a pod bound to node $GHOST_NODE"
	assert_eq "$(kubectl get pod own -o jsonpath='{.metadata.labels.app} {.spec.activeDeadlineSeconds} {.spec.containers[0].image} {.metadata.finalizers}')" \
		"policy-test  $TESTPOD_IMAGE " "pod own after the refused patches"

	# A token of the service account that names no node (not bound to a pod): refused.
	kubectl -n roce-ipvlan create token roce-ipvlan-installer --duration 10m >"$K8S_LOGS/unbound-token"
	code=$(as_token "$K8S_LOGS/unbound-token" PATCH /api/v1/namespaces/default/pods/own application/merge-patch+json \
		'{"metadata": {"annotations": {"roce-ipvlan.io/gids": "[]"}}}')
	[[ $code == 403 && $(answer) == *"names no node"* ]] ||
		fail "a token without a node: HTTP $code ($(answer)), expected 403, 'names no node'"
	note "a token without a node: 403 $(answer | sed 's/.*denied request: //' | cut -c1-80)"

	# The control: without the policy the same patches go through (RBAC allows them), so the
	# refusals above are the policy's.
	without_binding roce-ipvlan-installer-own-node "the installer's patches of a label and of another node's pod to pass" \
		unconfined ||
		fail "without the binding, the installer's patches are still refused: the refusals are not the policy's"
	note "without the binding: a label and another node's pod patched (HTTP 200); binding restored"
	wait_for 60 "the restored binding to refuse a label patch again" label_refused ||
		fail "the restored binding does not refuse the installer's label patch"
	kubectl delete pod ghost --force --grace-period=0 >/dev/null 2>&1
	kubectl delete node "$GHOST_NODE" >/dev/null
}

test_nobody_else_writes_the_gids_annotation() {
	local out
	# The cluster admin (kubectl here) stands for any user who may create or edit pods.
	if out=$(kubectl apply -f - 2>&1 <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: forged
  namespace: default
  annotations:
    roce-ipvlan.io/gids: '[{"interface": "net1", "gid_index": 1}]'
spec:
  nodeName: $K8S_NODE
  containers:
    - { name: main, image: $TESTPOD_IMAGE, command: ["sleep", "infinity"] }
YAML
	); then
		fail "a pod created with roce-ipvlan.io/gids was admitted"
	fi
	assert_match "$out" "roce-ipvlan-gids-annotation" "creating a pod with the annotation"
	note "create: ${out:0:160}"
	plain_pod own "$K8S_NODE"
	if out=$(kubectl annotate pod own 'roce-ipvlan.io/gids=[]' 2>&1); then
		fail "kubectl annotate of roce-ipvlan.io/gids was admitted"
	fi
	assert_match "$out" "roce-ipvlan-gids-annotation" "annotating a pod"
	# Other annotations stay the user's.
	kubectl annotate pod own example.com/mine=yes >/dev/null || fail "another annotation was refused"
	without_binding roce-ipvlan-gids-annotation "the forged annotation to pass" forge '[]' ||
		fail "without the binding the annotation is still refused: the refusal is not the policy's"
	note "without the binding: annotated; binding restored"
	wait_for 60 "the restored binding to refuse the annotation again" forge_refused
}
