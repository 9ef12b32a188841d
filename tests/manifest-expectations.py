"""What each rendering of deploy/, examples/ and the Helm chart must contain: the output is
checked against what its kustomization or values say (tests/validate-manifests.sh calls
check(name, docs) for each kustomize build and each chart rendering; an empty list passes).

The names: a kustomization's directory (deploy, deploy/openshift, deploy/uninstall,
deploy/uninstall/openshift, deploy/base, examples) or "chart:<values file name>" ("chart:defaults"
for the default values)."""
import json
import re

INSTALL_DIR = "/host/opt/cni/bin"
# The annotate container's /metrics port (docs/deploy.md#metrics; tools/metrics.rs DEFAULT_PORT).
METRICS_PORT = 9740
DASHBOARD = "charts/roce-ipvlan/dashboards/roce-ipvlan.json"
IMAGE_NAME = "ghcr.io/roce-ipvlan/roce-ipvlan"


def version():
    text = open("Cargo.toml").read()
    section = text[text.index("[workspace.package]"):]
    return re.search(r'^version = "(.*)"', section, re.M).group(1)


def of_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def installer(docs):
    ds = [d for d in of_kind(docs, "DaemonSet") if d["metadata"]["name"] == "roce-ipvlan-installer"]
    assert len(ds) == 1, f"expected one DaemonSet roce-ipvlan-installer, found {len(ds)}"
    return ds[0]


def check_installer(ds, *, mode, bin_dir, image, namespace, rails=None, openshift=False, metrics_port=METRICS_PORT):
    errors = []
    spec = ds["spec"]["template"]["spec"]
    c = spec["containers"][0]
    expect = lambda what, got, want: errors.append(f"{what}: {got!r}, expected {want!r}") if got != want else None
    expect("namespace", ds["metadata"].get("namespace"), namespace)
    # Every taint, as Multus: a node it skips cannot run roce-ipvlan attachments.
    expect("tolerations", spec.get("tolerations"), [{"operator": "Exists"}])
    expect("image", c["image"], image)
    volume = [v for v in spec["volumes"] if v["name"] == "cni-bin"][0]
    expect("hostPath", volume["hostPath"]["path"], bin_dir)
    rail_args = ["--rails", ",".join(rails)] if rails else []
    probe = c["readinessProbe"]["exec"]["command"]
    if mode == "install":
        # Readiness is the plugin's; rails gate it only when named, in both commands alike.
        expect("readiness probe", probe, ["/roce-ipvlan", "ready", "--to", INSTALL_DIR] + rail_args)
        expect("command", c["command"][:5], ["/roce-ipvlan", "install", "--to", INSTALL_DIR, "--wait"])
        got_rails = c["command"][c["command"].index("--rails"):][:2] if "--rails" in c["command"] else []
        expect("command's --rails", got_rails, rail_args)
    else:
        expect("command", c["command"], ["/roce-ipvlan", "uninstall", "--to", INSTALL_DIR, "--wait"])
        expect("readiness probe", probe, ["/roce-ipvlan", "uninstall", "--to", INSTALL_DIR, "--check"])
    # The pod annotations (docs/deploy.md#gid-indexes-in-the-pod-object): the service
    # account's token (annotate's alone, bound to the pod, so that it names the node the
    # admission policy holds it to), the node's name and the plugin's records (read-only).
    expect("serviceAccountName", spec.get("serviceAccountName"), "roce-ipvlan-installer")
    expect("automountServiceAccountToken", spec.get("automountServiceAccountToken"), False)
    expect("containers", [x["name"] for x in spec["containers"]], ["install", "annotate"])
    expect("default container", ds["spec"]["template"]["metadata"].get("annotations", {})
           .get("kubectl.kubernetes.io/default-container"), "install")
    annotate = [x for x in spec["containers"] if x["name"] == "annotate"]
    if not annotate:
        return errors  # said above ("containers")
    a = annotate[0]
    expect("annotate image", a["image"], image)
    expect("annotate command", a["command"], ["/roce-ipvlan-annotate", "--state-dir", "/host/run/roce-ipvlan"])
    expect("annotate env NODE_NAME", [e for e in a.get("env", []) if e["name"] == "NODE_NAME"],
           [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}])
    expect("annotate capabilities", a["securityContext"].get("capabilities"), {"drop": ["ALL"]})
    expect("annotate SELinux type", a["securityContext"].get("seLinuxOptions", {}).get("type"),
           "spc_t" if openshift else None)
    expect("annotate readiness probe", a.get("readinessProbe"), None)
    # /metrics and /healthz (docs/deploy.md#metrics): the port, named for the Service and the
    # probe, and the address variable that says the same port.
    expect("annotate ports", a.get("ports"), [{"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"}])
    expect("annotate env ROCE_IPVLAN_METRICS_ADDRESS",
           [e.get("value") for e in a.get("env", []) if e["name"] == "ROCE_IPVLAN_METRICS_ADDRESS"], [str(metrics_port)])
    expect("annotate liveness probe", (a.get("livenessProbe") or {}).get("httpGet"), {"path": "/healthz", "port": "metrics"})
    attachments = [v for v in spec["volumes"] if v["name"] == "attachments"]
    expect("attachments volume", attachments, [{"name": "attachments", "hostPath": {
        "path": "/run/roce-ipvlan/attachments", "type": "DirectoryOrCreate"}}])
    token = [v for v in spec["volumes"] if v["name"] == "token"]
    expect("token volume", token, [{"name": "token", "projected": {"defaultMode": 0o400, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}])
    published = [v for v in spec["volumes"] if v["name"] == "published"]
    expect("published volume", published, [{"name": "published", "hostPath": {"path": "/var/lib/roce-ipvlan",
                                                                          "type": "DirectoryOrCreate"}}])
    expect("annotate's mounts", [(m["name"], m["mountPath"], m.get("readOnly", False)) for m in a.get("volumeMounts", [])],
           [("attachments", "/host/run/roce-ipvlan/attachments", True),
            ("token", "/var/run/secrets/kubernetes.io/serviceaccount", True),
            ("published", "/host/var/lib/roce-ipvlan", False),
            ("command-stats", "/host/run/roce-ipvlan/metrics", True),
            ("netns", "/var/run/netns", True)])
    netns_mount = [m for m in a.get("volumeMounts", []) if m["name"] == "netns"]
    expect("netns mount propagation", [m.get("mountPropagation") for m in netns_mount], ["HostToContainer"])
    for name, path in (("command-stats", "/run/roce-ipvlan/metrics"), ("netns", "/var/run/netns")):
        expect(f"{name} volume", [v for v in spec["volumes"] if v["name"] == name],
               [{"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}])
    expect("install's mounts", [m["name"] for m in c.get("volumeMounts", [])], ["cni-bin"])
    selinux = c["securityContext"].get("seLinuxOptions", {}).get("type")
    expect("SELinux type", selinux, "spc_t" if openshift else None)
    return errors


def check_metrics(docs, namespace, *, port=METRICS_PORT, service=True, monitor=False, dashboard=False):
    """The headless Service over the installer pods, the optional ServiceMonitor and dashboard
    ConfigMap (docs/deploy.md#metrics); the dashboard parses and queries only metrics the code
    exports (tools/metrics.rs NAMES; its unit test checks the same from the Rust side)."""
    errors = []
    svc = [d for d in of_kind(docs, "Service") if d["metadata"]["name"] == "roce-ipvlan-metrics"]
    if not service:
        errors += [f"Service roce-ipvlan-metrics rendered, expected none"] if svc else []
    elif len(svc) != 1:
        errors.append(f"Service roce-ipvlan-metrics: {len(svc)} found, expected one")
    else:
        spec = svc[0]["spec"]
        want = {"clusterIP": "None", "selector": {"app.kubernetes.io/name": "roce-ipvlan",
                                                   "app.kubernetes.io/component": "cni-installer"},
                "ports": [{"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}]}
        got = {k: spec.get(k) for k in want}
        if got != want or svc[0]["metadata"].get("namespace") != namespace:
            errors.append(f"Service roce-ipvlan-metrics: {got} in {svc[0]['metadata'].get('namespace')}, expected {want} in {namespace}")
    sm = of_kind(docs, "ServiceMonitor")
    if [m["metadata"]["name"] for m in sm] != (["roce-ipvlan-metrics"] if monitor else []):
        errors.append(f"ServiceMonitors {[m['metadata']['name'] for m in sm]}, expected {'one' if monitor else 'none'}")
    for m in sm:
        if [e.get("port") for e in m["spec"]["endpoints"]] != ["metrics"]:
            errors.append(f"ServiceMonitor endpoints {m['spec']['endpoints']}, expected the port metrics")
    cms = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == "roce-ipvlan-dashboard"]
    if len(cms) != (1 if dashboard else 0):
        errors.append(f"dashboard ConfigMaps: {len(cms)}, expected {1 if dashboard else 0}")
    for cm in cms:
        if json.loads(cm["data"]["roce-ipvlan.json"]) != json.load(open(DASHBOARD)):
            errors.append(f"the dashboard ConfigMap differs from {DASHBOARD}")
    return errors + check_dashboard()


def exported_metrics():
    """The metric families plugin/src/tools/metrics.rs exports (its NAMES list)."""
    text = open("plugin/src/tools/metrics.rs").read()
    block = text[text.index("pub const NAMES"):]
    block = block[:block.index("];")]
    return set(re.findall(r'"(roce_ipvlan_[a-z_]+)"', block))


def check_dashboard():
    """The Grafana dashboard parses and every metric its queries name is exported."""
    dashboard = json.load(open(DASHBOARD))
    names = exported_metrics()
    exprs = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "expr" and isinstance(v, str):
                    exprs.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(dashboard)
    errors = [] if exprs else [f"{DASHBOARD}: no queries"]
    for expr in exprs:
        for word in re.findall(r"roce_ipvlan_[a-zA-Z0-9_]+", expr):
            family = next((word[:-len(s)] for s in ("_bucket", "_sum", "_count")
                           if word.endswith(s) and word[:-len(s)] in names), word)
            if family not in names:
                errors.append(f"{DASHBOARD} queries {word}, which plugin/src/tools/metrics.rs does not export")
    return errors


def check_rbac(docs, namespace):
    """The installer's service account, allowed to patch pods and create Events, nothing else."""
    errors = []
    sa = [d for d in of_kind(docs, "ServiceAccount") if d["metadata"]["name"] == "roce-ipvlan-installer"]
    if [d["metadata"].get("namespace") for d in sa] != [namespace]:
        errors.append(f"ServiceAccount roce-ipvlan-installer: {len(sa)} found, expected one in {namespace}")
    roles = [d for d in of_kind(docs, "ClusterRole") if d["metadata"]["name"] == "roce-ipvlan-installer"]
    want_rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
                  {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    if [r.get("rules") for r in roles] != [want_rules]:
        errors.append(f"ClusterRole roce-ipvlan-installer: {[r.get('rules') for r in roles]}, expected [{want_rules}]")
    bindings = [d for d in of_kind(docs, "ClusterRoleBinding") if d["metadata"]["name"] == "roce-ipvlan-installer"]
    want_binding = ({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "roce-ipvlan-installer"},
                    [{"kind": "ServiceAccount", "name": "roce-ipvlan-installer", "namespace": namespace}])
    if [(b["roleRef"], b["subjects"]) for b in bindings] != [want_binding]:
        errors.append(f"ClusterRoleBinding roce-ipvlan-installer: {bindings}, expected one binding {want_binding}")
    return errors


POLICY_FILE = "deploy/base/admission-policy.yaml"
POLICIES = ("roce-ipvlan-installer-own-node", "roce-ipvlan-gids-annotation")


def check_policy(docs, enabled=True):
    """The admission policies that confine the installer's token (docs/security.md), as
    deploy/base/admission-policy.yaml has them: the chart's copy must not drift from it."""
    import yaml
    want = {(d["kind"], d["metadata"]["name"]): _squeeze(d["spec"])
            for d in yaml.safe_load_all(open(POLICY_FILE)) if d}
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    got = {(d["kind"], d["metadata"]["name"]): _squeeze(d["spec"]) for d in docs if d.get("kind") in kinds}
    if not enabled:
        return [f"admission policy objects {sorted(got)}, expected none"] if got else []
    errors = []
    if sorted(want) != sorted((k, n) for k in kinds for n in POLICIES):
        errors.append(f"{POLICY_FILE}: objects {sorted(want)}, expected a policy and a binding each of {POLICIES}")
    for key, spec in want.items():
        if got.get(key) != spec:
            errors.append(f"{key[0]} {key[1]}: {'missing' if key not in got else 'differs from ' + POLICY_FILE}")
        if key[0] == kinds[0] and spec.get("failurePolicy") != "Fail":
            errors.append(f"{key[1]}: failurePolicy {spec.get('failurePolicy')!r}, expected Fail (fail closed)")
        if key[0] == kinds[1] and spec.get("validationActions") != ["Deny"]:
            errors.append(f"{key[1]}: validationActions {spec.get('validationActions')!r}, expected [Deny]")
    return errors


def _squeeze(node):
    """node with each run of whitespace in its strings made one space. A folded scalar (>-)
    with a more-indented line reads as "a\n  b" to PyYAML and as "a\n\n  b" to go-yaml
    (kustomize, Helm's and the API server's parsers); CEL does not mind either."""
    if isinstance(node, dict):
        return {k: _squeeze(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_squeeze(v) for v in node]
    return " ".join(node.split()) if isinstance(node, str) else node


def nads(docs):
    return {d["metadata"]["name"]: (d, json.loads(d["spec"]["config"]))
            for d in of_kind(docs, "NetworkAttachmentDefinition")}


def check_nads(docs, *, names, namespace, pool=None):
    errors = []
    found = nads(docs)
    if sorted(found) != sorted(names):
        errors.append(f"NADs {sorted(found)}, expected {sorted(names)}")
    for name, (d, conf) in found.items():
        if d["metadata"].get("namespace") != namespace:
            errors.append(f"NAD {name} in namespace {d['metadata'].get('namespace')}, expected {namespace}")
        if pool is not None:
            ipam = conf["ipam"]
            got = (ipam.get("poolType"), ipam.get("poolName"))
            if got != pool:
                errors.append(f"NAD {name}: nv-ipam (poolType, poolName) {got}, expected {pool}")
    return errors


def pools(docs):
    return {(d["kind"], d["metadata"]["name"]): d for d in of_kind(docs, "IPPool") + of_kind(docs, "CIDRPool")}


def check_pools(docs, want):
    errors = []
    found = pools(docs)
    if sorted(found) != sorted(want):
        errors.append(f"pools {sorted(found)}, expected {sorted(want)}")
    for key, d in found.items():
        # The examples' pools (examples/a100-ippool.yaml) select the GPU nodes.
        terms = d["spec"]["nodeSelector"]["nodeSelectorTerms"]
        want_terms = [{"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]
        if terms != want_terms:
            errors.append(f"{key}: nodeSelectorTerms {terms}, expected {want_terms} as in examples/")
    return errors


def check_namespace(docs, name):
    ns = [d for d in of_kind(docs, "Namespace") if d["metadata"]["name"] == name]
    if len(ns) != 1:
        return [f"expected the Namespace {name}, found {len(ns)}"]
    label = ns[0]["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce")
    return [] if label == "privileged" else [f"Namespace {name}: enforce label {label!r}, expected privileged"]


def check_chart_labels(docs, *, release="roce-ipvlan", app_version=None):
    """Every object the chart renders carries the instance, version and chart labels; the
    DaemonSet's selector (immutable: an upgrade that changed it would be refused) and the
    Service's select by name and component alone, as deploy/base's do."""
    errors = []
    want = {"app.kubernetes.io/name": "roce-ipvlan", "app.kubernetes.io/instance": release,
            "app.kubernetes.io/version": app_version or version(),
            "app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": f"roce-ipvlan-{version()}"}
    selector = {"app.kubernetes.io/name": "roce-ipvlan", "app.kubernetes.io/component": "cni-installer"}
    for d in docs:
        labels = d["metadata"].get("labels") or {}
        for key, value in want.items():
            if labels.get(key) != value:
                errors.append(f"{d['kind']} {d['metadata']['name']}: label {key} {labels.get(key)!r}, expected {value!r}")
    for ds in (d for d in of_kind(docs, "DaemonSet") if d["metadata"]["name"] == "roce-ipvlan-installer"):
        if ds["spec"]["selector"] != {"matchLabels": selector}:
            errors.append(f"DaemonSet selector {ds['spec']['selector']}, expected matchLabels {selector} (immutable)")
    for svc in of_kind(docs, "Service"):
        if svc["spec"].get("selector") != selector:
            errors.append(f"Service {svc['metadata']['name']}: selector {svc['spec'].get('selector')}, expected {selector}")
    return errors


def check_test_hook(docs):
    """`helm test` (templates/tests/ready.yaml): one test Pod that asks the installer's readiness
    question as its probe does, with the same image, binDir and node choice."""
    tests = [d for d in of_kind(docs, "Pod") if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
    if len(tests) != 1:
        return [f"expected one helm test Pod, found {len(tests)}"]
    pod, ds = tests[0], installer(docs)
    spec, ds_spec = pod["spec"], ds["spec"]["template"]["spec"]
    c, install = spec["containers"][0], ds_spec["containers"][0]
    errors = []
    expect = lambda what, got, want: errors.append(f"test Pod {what}: {got!r}, expected {want!r}") if got != want else None
    expect("command", c["command"], install["readinessProbe"]["exec"]["command"])
    expect("image", c["image"], install["image"])
    expect("namespace", pod["metadata"].get("namespace"), ds["metadata"].get("namespace"))
    for key in ("nodeSelector", "tolerations", "hostNetwork", "serviceAccountName", "automountServiceAccountToken"):
        expect(key, spec.get(key), ds_spec.get(key))
    expect("restartPolicy", spec.get("restartPolicy"), "Never")
    host = lambda s: [v["hostPath"]["path"] for v in s["volumes"] if v["name"] == "cni-bin"]
    expect("cni-bin hostPath", host(spec), host(ds_spec))
    expect("hostPath volumes", [v["name"] for v in spec["volumes"] if "hostPath" in v], ["cni-bin"])
    expect("mounts", c["volumeMounts"], [{"name": "cni-bin", "mountPath": INSTALL_DIR, "readOnly": True}])
    return errors


def check(name, docs):
    errors = _check(name, docs)
    if name.startswith("chart:"):
        try:
            errors += check_test_hook(docs)
            errors += check_chart_labels(docs, app_version="0.1.0-rc1" if name in ("chart:custom", "chart:digest") else None)
        except (AssertionError, KeyError, IndexError, TypeError, ValueError) as e:
            errors.append(f"unexpected shape: {type(e).__name__}: {e}")
    return errors


def _check(name, docs):
    v = version()
    image = f"{IMAGE_NAME}:{v}"
    try:
        if name in ("deploy", "deploy/base"):
            return (check_installer(installer(docs), mode="install", bin_dir="/opt/cni/bin", image=image,
                                    namespace="roce-ipvlan")
                    + check_namespace(docs, "roce-ipvlan") + check_rbac(docs, "roce-ipvlan") + check_policy(docs)
                    + check_metrics(docs, "roce-ipvlan"))
        if name == "deploy/openshift":
            return (check_installer(installer(docs), mode="install", bin_dir="/var/lib/cni/bin", image=image,
                                    namespace="roce-ipvlan", openshift=True)
                    + check_rbac(docs, "roce-ipvlan") + check_policy(docs))
        if name == "deploy/uninstall":
            return check_installer(installer(docs), mode="uninstall", bin_dir="/opt/cni/bin", image=image,
                                   namespace="roce-ipvlan")
        if name == "deploy/uninstall/openshift":
            return check_installer(installer(docs), mode="uninstall", bin_dir="/var/lib/cni/bin", image=image,
                                   namespace="roce-ipvlan", openshift=True)
        if name == "examples":
            # Every init container that runs roce-ipvlan takes the one image setting.
            errors = []
            for d in docs:
                for c in _containers(d):
                    if c["image"].split(":")[0].rsplit("/", 1)[-1] == "roce-ipvlan" and c["image"] != image:
                        errors.append(f"{d['kind']} {d['metadata']['name']}: image {c['image']}, expected {image}")
            return errors
        if name == "chart:defaults":
            return (check_installer(installer(docs), mode="install", bin_dir="/opt/cni/bin", image=image,
                                    namespace="roce-ipvlan")
                    + check_nads(docs, names=[], namespace="roce-ipvlan") + check_pools(docs, [])
                    + check_rbac(docs, "roce-ipvlan") + check_policy(docs)
                    + check_metrics(docs, "roce-ipvlan"))
        if name == "chart:openshift-deviceid":
            return (check_installer(installer(docs), mode="install", bin_dir="/var/lib/cni/bin", image=image,
                                    namespace="roce-ipvlan", openshift=True)
                    + check_rbac(docs, "roce-ipvlan") + check_policy(docs)
                    + check_nads(docs, names=["rdma-rails"], namespace="roce-ipvlan",
                                 pool=("cidrpool", "rdma-rail-cidr-pool"))
                    + check_pools(docs, [("CIDRPool", "rdma-rail-cidr-pool")]))
        if name == "chart:per-rail-ipv4":
            rails = ["rdma0", "rdma1", "rdma2", "rdma3"]
            return (check_installer(installer(docs), mode="install", bin_dir="/opt/cni/bin", image=image,
                                    namespace="roce-ipvlan", rails=rails)
                    + check_nads(docs, names=[f"rdma-rail-{i}" for i in range(4)], namespace="roce-ipvlan",
                                 pool=("ippool", "rdma-rail-pool"))
                    + check_pools(docs, [("IPPool", "rdma-rail-pool")]))
        if name == "chart:both-pools":
            return (check_nads(docs, names=["rdma-rail-0"], namespace="roce-ipvlan",
                               pool=("cidrpool", "rdma-rail-cidr-pool"))
                    + check_pools(docs, [("IPPool", "rdma-rail-pool"), ("CIDRPool", "rdma-rail-cidr-pool")]))
        if name == "chart:no-admission-policy":
            return (check_installer(installer(docs), mode="install", bin_dir="/opt/cni/bin", image=image,
                                    namespace="roce-ipvlan")
                    + check_policy(docs, enabled=False))
        if name == "chart:uninstall":
            return check_installer(installer(docs), mode="uninstall", bin_dir="/opt/cni/bin", image=image,
                                   namespace="roce-ipvlan")
        if name == "chart:namespace-create":
            return (check_installer(installer(docs), mode="install", bin_dir="/opt/cni/bin", image=image,
                                    namespace="roce-ipvlan")
                    + check_namespace(docs, "roce-ipvlan")
                    + check_nads(docs, names=["rdma-rail-0"], namespace="ml")
                    + [f"NAD ipam {conf['ipam']}, expected the values' host-local object as is"
                       for _, (d, conf) in nads(docs).items()
                       if conf["ipam"] != {"type": "host-local", "subnet": "10.224.0.0/16"}])
        if name == "chart:metrics":
            return (check_installer(installer(docs), mode="install", bin_dir="/opt/cni/bin", image=image,
                                    namespace="roce-ipvlan", metrics_port=9801)
                    + check_metrics(docs, "roce-ipvlan", port=9801, monitor=True, dashboard=True))
        if name == "chart:digest":
            # Pulled by digest, the tag kept (docs/deploy.md#helm).
            digest = "sha256:" + "0123456789abcdef" * 4
            return check_installer(installer(docs), mode="install", bin_dir="/opt/cni/bin",
                                   image=f"registry.example.com/roce-ipvlan:0.1.0-rc1@{digest}",
                                   namespace="roce-ipvlan")
        if name == "chart:custom":
            ds = installer(docs)
            spec = ds["spec"]["template"]["spec"]
            c = spec["containers"][0]
            want = {
                "image": "registry.example.com/roce-ipvlan:0.1.0-rc1",
                "imagePullPolicy": "Always",
                "hostPath": "/usr/libexec/cni",
                "nodeSelector": {"node-role.kubernetes.io/gpu": ""},
                "tolerations": [{"key": "example.com/maintenance", "operator": "Exists"}],
                "interval": ["--interval", "15"],
            }
            got = {
                "image": c["image"],
                "imagePullPolicy": c["imagePullPolicy"],
                "hostPath": [v for v in spec["volumes"] if v["name"] == "cni-bin"][0]["hostPath"]["path"],
                "nodeSelector": spec["nodeSelector"],
                "tolerations": spec["tolerations"],
                "interval": c["command"][c["command"].index("--interval"):][:2],
            }
            errors = [f"{k}: {got[k]!r}, expected {want[k]!r}" for k in want if got[k] != want[k]]
            errors += check_nads(docs, names=["rdma-rail-0"], namespace="roce-ipvlan",
                                 pool=("ippool", "rdma-rail-pool"))
            terms = pools(docs)[("IPPool", "rdma-rail-pool")]["spec"]["nodeSelector"]["nodeSelectorTerms"]
            want_terms = [{"matchExpressions": [{"key": "node-role.kubernetes.io/gpu", "operator": "In",
                                                 "values": [""]}]}]
            if terms != want_terms:
                errors.append(f"IPPool nodeSelectorTerms {terms}, expected {want_terms}")
            return errors
    except (AssertionError, KeyError, IndexError, TypeError, ValueError) as e:
        return [f"unexpected shape: {type(e).__name__}: {e}"]
    return [f"no expectations for {name}: add them to tests/manifest-expectations.py"]


def _containers(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)
