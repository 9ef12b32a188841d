#!/usr/bin/env bash
# Checks every YAML file under deploy/ and examples/, offline:
#   1. it parses (all documents), each object has apiVersion, kind and metadata.name, and a
#      kustomization's resources exist;
#   2. Kubernetes built-in kinds validate against the Kubernetes OpenAPI schemas, strictly
#      (unknown fields refused), with kubernetes-validate, which ships the schemas; so do the
#      pod templates of MPIJobs and PyTorchJobs (checked as PodTemplates), the Job templates of
#      JobSets (checked as Jobs) and what each
#      kustomization builds with kustomize (tests/kustomize/build.sh; deploy/, deploy/openshift/:
#      its patches must apply);
#   3. custom resources validate against JSON Schemas generated from the upstream CRDs'
#      openAPIV3Schema (tests/crd-schemas.py: NetworkAttachmentDefinition, IPPool, CIDRPool,
#      NicClusterPolicy, NicNodePolicy and every other CRD under ../shared/upstream/crds;
#      unknown fields refused as the API server's Strict field validation refuses them; absent
#      CRDs fail with where to get them), and the kinds no CRD there defines (MPIJob,
#      PyTorchJob, JobSet, ServiceMonitor) against the project's hand-written schemas,
#      tests/schemas/custom-resources.yaml; a custom kind with neither fails;
#   4. `roce-ipvlan validate --strict` over all files as one set: every roce-ipvlan
#      configuration passes the plugin's own checks, and every workload's attachments match its
#      RDMA resources and the NicClusterPolicies' offers; warnings fail;
#   5. (default file set only) the Helm chart charts/roce-ipvlan: its README.md is what
#      tools/chart-readme.py generates from values.yaml and values.schema.json, and the two list
#      the same keys; `helm lint --strict` (values.schema.json included) and
#      rendered with its default values and each tests/helm-values/*.yaml, by Helm v4 as a
#      library (helm-python-sdk, offline); each rendering (the `helm test` Pod included)
#      passes 1-4 as a set of its own, and a values file with an "# expect-fail:" line must be
#      refused (by a template's fail or by the schema) with that message;
#   (2, 5) each kustomize build and each chart rendering holds what its kustomization or values
#      say (tests/manifest-expectations.py: tolerations, image, probes, mode, paths, NADs'
#      namespace and pools, the namespace's Pod Security label);
#   6. (default file set only) the known-bad manifests in tests/validate-fixtures/ each fail,
#      with the message their "# expect:" line names: the checks above can fail.
#
#   tests/validate-manifests.sh [FILE...]     (default: deploy/ and examples/)
# Environment: ROCE_IPVLAN_BIN (default target/debug/roce-ipvlan), ROCE_IPVLAN_UPSTREAM (the
# upstream CRDs' parent, default ../shared/upstream), K8S_VERSION (schemas,
# default 1.36.0, the version the reference clusters run), VALIDATE_VENV (where
# kubernetes-validate and helm-python-sdk are installed, created on first use from PyPI;
# default ~/.cache/roce-ipvlan/validate-venv).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bin=${ROCE_IPVLAN_BIN:-$repo/target/debug/roce-ipvlan}
k8s=${K8S_VERSION:-1.36.0}
venv=${VALIDATE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan/validate-venv}
# The Network Operator release the examples' NicClusterPolicy and NicNodePolicies take their
# components from (image, repository, version as its hack/release.yaml names them, in
# ../shared/upstream): named here only; its CRDs are the ones tests/crd-schemas.py reads.
network_operator_release=v26.7.0-rc.2
export NETWORK_OPERATOR_RELEASE_FILE=${ROCE_IPVLAN_UPSTREAM:-$repo/../shared/upstream}/network-operator-$network_operator_release-release.yaml
[[ -r $NETWORK_OPERATOR_RELEASE_FILE ]] || {
	echo "validate-manifests: $NETWORK_OPERATOR_RELEASE_FILE not found: the upstream files live beside the project, not in it (../shared/upstream/README.md: hack/release.yaml of github.com/Mellanox/network-operator tag $network_operator_release); set ROCE_IPVLAN_UPSTREAM to where they are" >&2
	exit 1
}
# Pinned: a new release may bundle other schema versions and change what passes.
kv_version=1.37.0
# Helm v4 as a library (libhelm_c over Helm's Go SDK, in the wheel): renders and lints the
# chart offline, no helm binary.
helm_sdk_version=0.2.2

if (($# > 0)); then
	files=("$@")
	fixtures=()
else
	mapfile -t files < <(find deploy examples -name '*.yaml' -o -name '*.yml' | sort)
	mapfile -t fixtures < <(find tests/validate-fixtures -name '*.yaml' | sort)
fi
((${#files[@]} > 0)) || { echo "validate-manifests: no YAML files found" >&2; exit 1; }
[[ -x $bin ]] || { echo "validate-manifests: $bin not found; run 'make build'" >&2; exit 1; }

if [[ ! -x $venv/bin/kubernetes-validate ]] ||
	[[ $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))' 2>/dev/null) != "$kv_version" ]]; then
	echo "validate-manifests: installing kubernetes-validate $kv_version into $venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$kv_version"
fi
if [[ $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("helm-python-sdk"))' 2>/dev/null) != "$helm_sdk_version" ]]; then
	echo "validate-manifests: installing helm-python-sdk $helm_sdk_version into $venv"
	"$venv/bin/pip" install -q --disable-pip-version-check "helm-python-sdk==$helm_sdk_version"
fi

# kustomize builds deploy/'s and examples/ kustomizations (the release kubectl 1.36 embeds).
KUSTOMIZE=$(tests/kustomize/build.sh) || { echo "validate-manifests: cannot build kustomize (tests/kustomize/build.sh)" >&2; exit 1; }
export KUSTOMIZE

templates=$(mktemp --suffix=.yaml)
trap 'rm -f "$templates"' EXIT

echo "== parse, custom resources against the upstream CRDs' schemas and tests/schemas/custom-resources.yaml (${#files[@]} files)"
check_files() { # FILE... : parse + custom-resource schemas; pod templates of jobs to $templates
	"$venv/bin/python" - "$templates" "$@" <<'PY'
import os, subprocess, sys, yaml, jsonschema
sys.path.insert(0, "tests")
expectations = __import__("manifest-expectations")
crd_schemas = __import__("crd-schemas")
try:
    generated, _ = crd_schemas.load()
except crd_schemas.MissingUpstream as e:
    sys.exit(f"validate-manifests: {e}")
schemas = yaml.safe_load(open("tests/schemas/custom-resources.yaml"))
both = set(generated) & set(schemas["kinds"])
if both:
    sys.exit(f"validate-manifests: {', '.join(sorted(both))}: an upstream CRD defines it; "
             "remove its hand-written schema from tests/schemas/custom-resources.yaml")
# Hand-written schemas refer to their definitions; generated ones are self-contained.
kind_schemas = {k: dict(v, definitions=schemas["definitions"]) for k, v in schemas["kinds"].items()}
kind_schemas.update(generated)
builtin = {"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
           "admissionregistration.k8s.io/v1"}
templates_out, paths = sys.argv[1], sys.argv[2:]
templates, bad = [], 0

release_file = os.environ["NETWORK_OPERATOR_RELEASE_FILE"]
release = {}  # image -> [(repository, version)]
for entry in yaml.safe_load(open(release_file)).values():
    release.setdefault(entry["image"], []).append((entry["repository"], entry["version"]))

def release_errors(node, where):
    """Each Network Operator component (image, repository, version) in an example must be the
    release's, as its release.yaml names it: the examples name one release, the one above."""
    if isinstance(node, dict):
        if "image" in node and "version" in node and isinstance(node["image"], str):
            have = (node.get("repository"), node["version"])
            want = release.get(node["image"])
            if want is None:
                yield f"{where}: image {node['image']} is not a component of {os.path.basename(release_file)}"
            elif have not in want:
                yield (f"{where}: {node['image']} from {have[0]}, version {have[1]}; "
                       f"{os.path.basename(release_file)} has {', '.join(f'{r}, version {v}' for r, v in want)}")
        for key, value in node.items():
            yield from release_errors(value, f"{where}.{key}")

def render(kdir):
    """What kustomize (tests/kustomize/build.sh) builds from kdir; raises OSError with
    kustomize's message when it cannot build (a patch path that does not exist, a cycle, ...)."""
    run = subprocess.run([os.environ["KUSTOMIZE"], "build", kdir], capture_output=True, text=True)
    if run.returncode != 0:
        raise OSError(run.stderr.strip())
    return [d for d in yaml.safe_load_all(run.stdout) if d]
for path in paths:
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        print(f"ERROR {path}: not valid YAML: {e}"); bad += 1; continue
    for i, d in enumerate(docs, 1):
        where = f"{path} document {i}"
        if not isinstance(d, dict):
            print(f"ERROR {where}: not a mapping"); bad += 1; continue
        if d.get("kind") == "Component" and d.get("apiVersion", "").startswith("kustomize.config.k8s.io/"):
            # Built as part of the kustomizations that use it.
            print(f"ok    {path}: kustomize Component"); continue
        if d.get("kind") == "Kustomization":
            for key in ("resources", "components"):
                for r in d.get(key, []):
                    if not os.path.exists(os.path.join(os.path.dirname(path), r)):
                        print(f"ERROR {path}: {key[:-1]} {r} does not exist"); bad += 1
            try:
                # Rendered, then checked as Kubernetes objects with the rest, and against what
                # it must hold (tests/manifest-expectations.py).
                built = render(os.path.dirname(path) or ".")
                templates += built
                name = os.path.normpath(os.path.dirname(path) or ".")
                for e in expectations.check(name, built):
                    print(f"ERROR {path}: built: {e}"); bad += 1
            except OSError as e:
                print(f"ERROR {path}: cannot build: {e}"); bad += 1
            continue
        missing = [k for k in ("apiVersion", "kind") if not d.get(k)]
        if not (d.get("metadata") or {}).get("name"):
            missing.append("metadata.name")
        if missing:
            print(f"ERROR {where}: missing {', '.join(missing)}"); bad += 1; continue
        key = f"{d['apiVersion']} {d['kind']}"
        if key in kind_schemas:
            schema = kind_schemas[key]
            errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(d), key=lambda e: list(e.path))
            for e in errors:
                field = ".".join(str(p) for p in e.path) or "(top)"
                print(f"ERROR {where} {key}: {field}: {e.message}"); bad += 1
        elif d["apiVersion"] not in builtin:
            print(f"ERROR {where}: {key} has no schema: no CRD under ../shared/upstream/crds defines it and "
                  "tests/schemas/custom-resources.yaml has none; add one there"); bad += 1
        if d["kind"] in ("NicClusterPolicy", "NicNodePolicy") and os.path.normpath(path).startswith("examples" + os.sep):
            for e in release_errors(d.get("spec"), f"{where} {d['kind']} spec"):
                print(f"ERROR {e}"); bad += 1
        for job in (d.get("spec") or {}).get("replicatedJobs") or [] if d["kind"] == "JobSet" else []:
            # A JobSet's replicated job is a Job template: checked as a batch/v1 Job.
            templates.append({"apiVersion": "batch/v1", "kind": "Job",
                              "metadata": {"name": f"{d['metadata']['name']}-{job.get('name', 'x')}"},
                              "spec": (job.get("template") or {}).get("spec") or {}})
        replicas = {"MPIJob": "mpiReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs"}.get(d["kind"])
        for role, spec in ((d.get("spec") or {}).get(replicas) or {}).items() if replicas else []:
            templates.append({"apiVersion": "v1", "kind": "PodTemplate",
                              "metadata": {"name": f"{d['metadata']['name']}-{role.lower()}"},
                              "template": (spec or {}).get("template") or {}})
    print(f"ok    {path}: {len(docs)} document(s)")
with open(templates_out, "w") as f:
    yaml.safe_dump_all(templates, f)
sys.exit(1 if bad else 0)
PY
}
check_files "${files[@]}"

echo "== Kubernetes $k8s schemas (strict)"
check_k8s() { # FILE... and the pod templates check_files found
	local k8s_files=("$@") out rc
	[[ ! -s $templates ]] || k8s_files+=("$templates")
	out=$("$venv/bin/kubernetes-validate" --strict -k "$k8s" "${k8s_files[@]}" 2>&1) && rc=0 || rc=$?
	# Custom resources have no bundled schema: kubernetes-validate warns and passes them.
	# Passing objects are listed at INFO level: only the failures are worth reading.
	grep -v "Couldn't find schema for kind\|^INFO .* passed for resource" <<<"$out" || true
	return "$rc"
}
check_k8s "${files[@]}" || { echo "validate-manifests: schema validation failed" >&2; exit 1; }

echo "== roce-ipvlan validate --strict"
"$bin" validate --strict "${files[@]}" | grep -v '^skip ' || true
"$bin" validate --strict "${files[@]}" >/dev/null || { echo "validate-manifests: roce-ipvlan validate failed" >&2; exit 1; }

if ((${#fixtures[@]} > 0)); then
	echo "== Helm chart charts/roce-ipvlan: README.md and values.schema.json against values.yaml"
	python3 tools/chart-readme.py --check ||
		{ echo "validate-manifests: charts/roce-ipvlan/README.md or values.schema.json out of step with values.yaml" >&2; exit 1; }
	echo "ok    charts/roce-ipvlan/README.md is tools/chart-readme.py's output; the schema lists every value"

	echo "== Helm chart charts/roce-ipvlan: lint (strict), then each rendering as its own set"
	rendered=$(mktemp -d)
	trap 'rm -rf "$templates" "$rendered"' EXIT
	"$venv/bin/python" - "$rendered" charts/roce-ipvlan tests/helm-values/*.yaml <<'PY'
import os, sys, yaml, helm_python as helm
out_dir, chart_dir, value_files = sys.argv[1], sys.argv[2], sys.argv[3:]
report = helm.lint(chart_dir, strict=True, kube_version="v1.36.0")
# Severity 1 is info ("icon is recommended"); 2 warning, 3 error.
problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
for m in problems:
    print(f"ERROR helm lint: {m}")
chart = helm.Chart.load(chart_dir)
sys.path.insert(0, "tests")
expectations = __import__("manifest-expectations")
bad = len(problems)
for vf in [None] + value_files:
    name = os.path.basename(vf)[:-5] if vf else "defaults"
    text = open(vf).read() if vf else ""
    values = yaml.safe_load(text) if vf else None
    # "# release-namespace: NS": helm -n NS; "# expect-fail: MESSAGE": the chart must refuse
    # these values with MESSAGE.
    namespace = ([l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("# release-namespace:")]
                 or ["roce-ipvlan"])[0]
    expect_fail = [l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("# expect-fail:")]
    try:
        manifests = chart.render(values, name="roce-ipvlan", namespace=namespace, is_install=True)
    except Exception as e:
        if expect_fail and expect_fail[0] in str(e):
            print(f"ok    {vf}: refused with: {expect_fail[0]}")
        else:
            print(f"ERROR {vf}: cannot render: {e}"); bad += 1
        continue
    if expect_fail:
        print(f"ERROR {vf}: rendered, but the chart must refuse it with: {expect_fail[0]}"); bad += 1
        continue
    docs = [d for t, text in sorted(manifests.items()) if t.endswith(".yaml")
            for d in yaml.safe_load_all(text) if d]
    with open(os.path.join(out_dir, f"{name}.yaml"), "w") as f:
        yaml.safe_dump_all(docs, f)
    errors = expectations.check(f"chart:{name}", docs)
    for e in errors:
        print(f"ERROR rendered with {vf or 'the default values'}: {e}"); bad += 1
    print(f"{'ok   ' if not errors else 'ERROR'} rendered with {vf or 'the default values'}: "
          + ", ".join(f"{d['kind']} {d['metadata']['name']}" for d in docs))
sys.exit(1 if bad else 0)
PY
	for r in "$rendered"/*.yaml; do
		echo "-- $(basename "$r" .yaml)"
		{ check_files "$r" && check_k8s "$r" && "$bin" validate --strict "$r"; } | grep -v '^skip \|^ok    \|^INFO' || true
		{ check_files "$r" && check_k8s "$r" && "$bin" validate --strict "$r"; } >/dev/null 2>&1 ||
			{ echo "validate-manifests: the chart rendered with $(basename "$r") fails the checks above" >&2; exit 1; }
	done

	echo "== known-bad manifests (tests/validate-fixtures): each must fail as its '# expect:' says"
	bad=0
	for f in "${fixtures[@]}"; do
		expect=$(sed -n 's/^# expect: //p' "$f")
		[[ -n $expect ]] || { echo "ERROR $f: no '# expect: <message>' line"; bad=1; continue; }
		# A fixture is checked together with the files it names on '# with:' lines.
		mapfile -t with < <(sed -n 's/^# with: //p' "$f")
		out=$( { check_files "$f" && check_k8s "$f" && "$bin" validate --strict "${with[@]}" "$f"; } 2>&1) && rc=0 || rc=$?
		if ((rc == 0)); then
			echo "ERROR $f: passed, but it must fail with: $expect"; bad=1
		elif ! grep -qF -- "$expect" <<<"$out"; then
			echo "ERROR $f: failed, but not with: $expect"; echo "$out"; bad=1
		else
			echo "ok    $f: fails with: $expect"
		fi
	done
	((bad == 0)) || { echo "validate-manifests: a known-bad manifest was not caught" >&2; exit 1; }
fi
echo "validate-manifests: all ${#files[@]} files passed"
