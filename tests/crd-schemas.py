"""JSON Schemas for custom resources, generated from the upstream CRDs (offline).

The project does not keep copies of upstream CRDs: they live beside it, in
../shared/upstream/crds/ (../shared/upstream/README.md says where each comes from). This
module reads every CustomResourceDefinition there and turns each served version's
openAPIV3Schema into a JSON Schema (draft 7) that refuses what `kubectl apply
--dry-run=server` refuses with its default field validation (Strict):
  - an object without x-kubernetes-preserve-unknown-fields refuses unknown properties: the API
    server prunes them, and Strict field validation turns a pruned field into an error, also
    for an object that declares no properties at all;
  - x-kubernetes-int-or-string takes an integer or a string; nullable takes null;
  - x-kubernetes-embedded-resource and the root object keep apiVersion, kind and metadata, and
    metadata is checked as the ObjectMeta fields the API server knows (the CRD only says
    "type: object" there);
  - x-kubernetes-validations (CEL) rules are not evaluated offline: the Kubernetes node's suite
    (tests/k8s/suite/*-crds.sh) applies the examples to an API server that does.
Results are cached by the CRDs' and this file's content (~/.cache/roce-ipvlan/crd-schemas/).

  python3 tests/crd-schemas.py [--list]   generate (or reuse) the schemas; print the cache path
                                          (--list: the kinds)
Environment: ROCE_IPVLAN_UPSTREAM (default: ../shared/upstream from the project root).
"""
import copy
import glob
import hashlib
import json
import os
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The release is named once, in tests/validate-manifests.sh; README.md there names the tags.
WHERE = ("../shared/upstream/README.md (the Network Operator's CRDs, unchanged from "
         "github.com/Mellanox/network-operator at the release tests/validate-manifests.sh names, "
         "deployment/network-operator/crds/ and its sriov-network-operator chart's crds/, and "
         "nv-ipam's, from github.com/Mellanox/nvidia-k8s-ipam deploy/crds/)")

# What the API server accepts in an object's metadata on create, besides what it sets itself.
OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 253,
                 "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
    },
    "additionalProperties": False,
}


class MissingUpstream(Exception):
    pass


def upstream_dir():
    return os.environ.get("ROCE_IPVLAN_UPSTREAM") or os.path.normpath(
        os.path.join(REPO, "..", "shared", "upstream"))


def crd_files(upstream):
    files = sorted(glob.glob(os.path.join(upstream, "crds", "**", "*.yaml"), recursive=True))
    if not files:
        raise MissingUpstream(
            f"no CRDs under {os.path.join(upstream, 'crds')}: the custom resources are checked "
            f"against the upstream CRDs, kept beside the project, not in it; get them as "
            f"{WHERE} says, into {upstream}/crds/, or point ROCE_IPVLAN_UPSTREAM at a copy")
    return files


def convert(node, embedded=False):
    """One openAPIV3Schema node as JSON Schema (draft 7)."""
    out = {}
    for key in ("description", "enum", "pattern", "minimum", "maximum", "exclusiveMinimum",
                "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
                "uniqueItems", "minProperties", "maxProperties", "required", "multipleOf"):
        if key in node:
            out[key] = copy.deepcopy(node[key])
    out.pop("description", None)  # not needed to validate; keeps the cache small
    if node.get("type") and not node.get("x-kubernetes-int-or-string"):
        out["type"] = node["type"]
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in node:
            # Structural schemas repeat only value validations here (no types of their own).
            out[key] = [convert(n) for n in node[key]]
    if "not" in node:
        out["not"] = convert(node["not"])
    if "items" in node:
        out["items"] = convert(node["items"])
    embedded = embedded or node.get("x-kubernetes-embedded-resource", False)
    if node.get("type") == "object":
        props = {k: convert(v) for k, v in (node.get("properties") or {}).items()}
        if embedded:
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            props["metadata"] = OBJECT_META
        out["properties"] = props
        if "additionalProperties" in node:
            ap = node["additionalProperties"]
            out["additionalProperties"] = convert(ap) if isinstance(ap, dict) else ap
        elif not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if node.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = types + ["null"]
    return out


def generate(files):
    kinds = {}
    for path in files:
        for crd in yaml.safe_load_all(open(path)):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if not version.get("served"):
                    continue
                schema = convert(version["schema"]["openAPIV3Schema"], embedded=True)
                api_version = f"{spec['group']}/{version['name']}"
                kind = spec["names"]["kind"]
                schema["properties"]["apiVersion"] = {"const": api_version}
                schema["properties"]["kind"] = {"const": kind}
                schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata"})
                if spec["scope"] == "Cluster":
                    # The API server drops a namespace given to a cluster-scoped object; here it
                    # is refused, as a sign the object was taken for a namespaced one.
                    schema["properties"]["metadata"] = dict(
                        OBJECT_META, properties={k: v for k, v in OBJECT_META["properties"].items()
                                                 if k != "namespace"})
                schema["$comment"] = f"generated by tests/crd-schemas.py from {os.path.relpath(path, REPO)}"
                kinds[f"{api_version} {kind}"] = schema
    return kinds


def load():
    """{"apiVersion kind": JSON Schema} for every served version of every upstream CRD; raises
    MissingUpstream when the CRDs are not there."""
    files = crd_files(upstream_dir())
    digest = hashlib.sha256(open(__file__, "rb").read())
    for path in files:
        digest.update(path.encode() + b"\0" + open(path, "rb").read())
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "roce-ipvlan", "crd-schemas", digest.hexdigest()[:16] + ".json")
    if os.path.exists(cache):
        with open(cache) as f:
            return json.load(f), cache
    kinds = generate(files)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    with open(cache + ".tmp", "w") as f:
        json.dump(kinds, f, sort_keys=True)
    os.replace(cache + ".tmp", cache)
    return kinds, cache


if __name__ == "__main__":
    try:
        kinds, cache = load()
    except MissingUpstream as e:
        sys.exit(f"crd-schemas: {e}")
    print(cache)
    if "--list" in sys.argv[1:]:
        print("\n".join(sorted(kinds)))
