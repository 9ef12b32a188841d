#!/usr/bin/env bash
# Checks every YAML file under deploy/ and examples/, offline:
#   1. it parses (all documents), each object has apiVersion, kind and metadata.name, and a
#      kustomization's resources exist;
#   2. Kubernetes built-in kinds validate against the Kubernetes OpenAPI schemas, strictly
#      (unknown fields refused), with kubernetes-validate, which ships the schemas;
#      custom resources (NetworkAttachmentDefinition, NicClusterPolicy, IPPool, ...) have no
#      bundled schema and are only parsed;
#   3. every roce-ipvlan configuration (NAD spec.config) passes the plugin's own checks:
#      `roce-ipvlan validate`.
#
#   tests/validate-manifests.sh [FILE...]     (default: deploy/ and examples/)
# Environment: ROCE_IPVLAN_BIN (default target/debug/roce-ipvlan), K8S_VERSION (schemas,
# default 1.36.0, the version the reference clusters run), VALIDATE_VENV (where kubernetes-validate is installed, created on first use
# from PyPI; default ~/.cache/roce-ipvlan/validate-venv).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bin=${ROCE_IPVLAN_BIN:-$repo/target/debug/roce-ipvlan}
k8s=${K8S_VERSION:-1.36.0}
venv=${VALIDATE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan/validate-venv}
# Pinned: a new release may bundle other schema versions and change what passes.
kv_version=1.37.0

if (($# > 0)); then
	files=("$@")
else
	mapfile -t files < <(find deploy examples -name '*.yaml' -o -name '*.yml' | sort)
fi
((${#files[@]} > 0)) || { echo "validate-manifests: no YAML files found" >&2; exit 1; }
[[ -x $bin ]] || { echo "validate-manifests: $bin not found; run 'make build'" >&2; exit 1; }

if [[ ! -x $venv/bin/kubernetes-validate ]] ||
	[[ $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))' 2>/dev/null) != "$kv_version" ]]; then
	echo "validate-manifests: installing kubernetes-validate $kv_version into $venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$kv_version"
fi

echo "== parse (${#files[@]} files)"
"$venv/bin/python" - "${files[@]}" <<'PY'
import os, sys, yaml
bad = 0
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        print(f"ERROR {path}: not valid YAML: {e}"); bad += 1; continue
    for i, d in enumerate(docs, 1):
        if not isinstance(d, dict):
            print(f"ERROR {path} document {i}: not a mapping"); bad += 1; continue
        if d.get("kind") == "Kustomization":
            for r in d.get("resources", []):
                if not os.path.exists(os.path.join(os.path.dirname(path), r)):
                    print(f"ERROR {path}: resource {r} does not exist"); bad += 1
            continue
        missing = [k for k in ("apiVersion", "kind") if not d.get(k)]
        if not (d.get("metadata") or {}).get("name"):
            missing.append("metadata.name")
        if missing:
            print(f"ERROR {path} document {i}: missing {', '.join(missing)}"); bad += 1
    print(f"ok    {path}: {len(docs)} document(s)")
sys.exit(1 if bad else 0)
PY

echo "== Kubernetes $k8s schemas (strict)"
out=$("$venv/bin/kubernetes-validate" --strict -k "$k8s" "${files[@]}" 2>&1) && rc=0 || rc=$?
# Custom resources have no bundled schema: kubernetes-validate warns and passes them.
grep -v "Couldn't find schema for kind" <<<"$out" || true
((rc == 0)) || { echo "validate-manifests: schema validation failed" >&2; exit 1; }

echo "== roce-ipvlan validate"
"$bin" validate "${files[@]}" | grep -v '^skip ' || true
"$bin" validate "${files[@]}" >/dev/null || { echo "validate-manifests: roce-ipvlan validate failed" >&2; exit 1; }
echo "validate-manifests: all ${#files[@]} files passed"
