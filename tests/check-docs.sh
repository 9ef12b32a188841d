#!/usr/bin/env bash
# Keeps the docs honest where a machine can (make validate-manifests runs this):
#   1. every relative link in README.md and docs/*.md resolves: the file exists and, for a
#      #fragment into a Markdown file, a heading of that file gives that GitHub anchor;
#   2. every fenced ```json or ```yaml block in them that is a roce-ipvlan configuration (a
#      "type": "roce-ipvlan" plugin, a configuration list holding one, or a
#      NetworkAttachmentDefinition) goes through `roce-ipvlan validate` on its own and must
#      pass; `//` comments (contract.md's annotated JSON) are removed first. A block that shows
#      a configuration the plugin refuses is marked by the line `<!-- validate: refused -->`
#      right before it, and must fail;
#   3. every `docs/<page>.md#<anchor>` (or `<page>.md#<anchor>`) named in the manifests, the
#      chart, the examples, the Makefile, the sources and the scripts names a heading that
#      exists (a renamed section otherwise leaves comments pointing nowhere);
#   4. figures and codes the docs quote that the code or the Makefile defines: the error-code
#      tables against error.rs (and the code of the exclusive netns mode refusal), the ifalias
#      keys ADD writes against contract.md, make fuzz's duration, the concurrency test's size,
#      every example naming the image listed in examples/kustomization.yaml, and the static binary's size (when built) within 5 % of deploy.md's figure;
#   5. error codes quoted in the prose ("code 104", "fails with 109", "(110)"): each one error.rs
#      assigns, and a sentence that quotes one code and names one cause with a code of its own
#      (exclusive netns mode, a full GID table, a failpoint, DAD/SLAAC, the GID wait's timeout)
#      quotes that cause's code;
#   6. test counts: make test's SUITE_EXPECT for each tier equals the tests the tier runs (the
#      test_* functions of its suite files under its skip rules, the ignored Rust tests, the fuzz
#      targets), and docs/testing.md quotes those numbers (the SUITE_EXPECT list, the VM suite's
#      size and shards, routed6's count); make k8s-test's time range holds every run the page
#      lists for it, and each of those is a run the page reports.
#   tests/check-docs.sh      Environment: ROCE_IPVLAN_BIN (default target/debug/roce-ipvlan).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bin=${ROCE_IPVLAN_BIN:-$repo/target/debug/roce-ipvlan}
[[ -x $bin ]] || { echo "check-docs: $bin not found; run 'make build'" >&2; exit 1; }
mapfile -t others < <(git ls-files deploy charts examples Makefile plugin tests bench tools | grep -v '^tests/validate-fixtures/')
python3 - "$bin" "${#others[@]}" "${others[@]}" README.md docs/*.md <<'PY'
import os, re, subprocess, sys, tempfile
bin_, n = sys.argv[1], int(sys.argv[2])
others, files = sys.argv[3:3 + n], sys.argv[3 + n:]
bad = 0

def anchors(path):
    """GitHub's heading anchors of a Markdown file (lower case, punctuation dropped, spaces
    to dashes, repeats numbered)."""
    seen, out, fence = {}, set(), False
    for line in open(path):
        if line.startswith("```"):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().lower()
        text = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        n = seen.get(text, 0)
        seen[text] = n + 1
        out.add(text if n == 0 else f"{text}-{n}")
    return out

link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
checked_links = checked_blocks = 0
for path in files:
    text = open(path).read()
    # Links outside code.
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    for target in link.findall(prose):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file, _, fragment = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        checked_links += 1
        if not os.path.exists(dest):
            print(f"ERROR {path}: link {target}: {dest} does not exist"); bad += 1
        elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
            print(f"ERROR {path}: link {target}: {dest} has no heading #{fragment}"); bad += 1
    # Configuration blocks.
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(json|yaml)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        body = "\n".join(lines[start + 1:j])
        refused = start > 0 and lines[start - 1].strip() == "<!-- validate: refused -->"
        i = j + 1
        is_conf = re.search(r'"type":\s*"roce-ipvlan"', body) or "kind: NetworkAttachmentDefinition" in body
        if not is_conf:
            continue
        if m.group(1) == "json":
            body = re.sub(r"(?m)\s*//.*$", "", body)
        checked_blocks += 1
        with tempfile.NamedTemporaryFile("w", suffix=f".{m.group(1)}", delete=False) as f:
            f.write(body + "\n")
        out = subprocess.run([bin_, "validate", f.name], capture_output=True, text=True)
        os.unlink(f.name)
        where = f"{path}:{start + 1}"
        if refused and out.returncode == 0:
            print(f"ERROR {where}: marked refused, but validate accepts it:\n{out.stdout}"); bad += 1
        elif not refused and out.returncode != 0:
            print(f"ERROR {where}: validate refuses this configuration:\n{out.stdout}{out.stderr}"); bad += 1
# Section references from outside the docs.
ref = re.compile(r"(?<![\w/.-])((?:docs/)?[\w-]+\.md)#([\w-]+)")
checked_refs = 0
for path in others:
    try:
        text = open(path).read()
    except (UnicodeDecodeError, OSError):
        continue
    for page, fragment in ref.findall(text):
        dest = page if page.startswith("docs/") or os.path.exists(page) else f"docs/{page}"
        checked_refs += 1
        if not os.path.exists(dest):
            print(f"ERROR {path}: {page}#{fragment}: {dest} does not exist"); bad += 1
        elif fragment not in anchors(dest):
            print(f"ERROR {path}: {page}#{fragment}: {dest} has no heading #{fragment}"); bad += 1

# Figures and codes the docs quote that the code or the Makefile defines.
facts = 0
def fact(ok, what):
    global bad, facts
    facts += 1
    if not ok:
        print(f"ERROR {what}"); bad += 1

def read(path):
    return open(path).read()

# Error codes: code() in error.rs assigns every one; configuration.md's table lists exactly
# those (and 999, a panic); contract.md's table none other.
err_rs = read("plugin/src/protocol/error.rs")
variant_code = dict(re.findall(r"Error::(\w+)(?: \{ \.\. \}|\(_\))? => (\d+),", err_rs))
codes = set(variant_code.values()) | {"999"}
def table_codes(path, heading):
    text = read(path)
    i = text.find(heading)
    j = text.find("\n## ", i + 1)
    return dict(re.findall(r"^\| (\d+) \| (.*)$", text[i:j if j > 0 else None], re.M))
conf_codes = table_codes("docs/configuration.md", "| code |")
fact(set(conf_codes) == codes, f"docs/configuration.md's error table lists codes {sorted(conf_codes, key=int)}, "
     f"plugin/src/protocol/error.rs assigns {sorted(codes, key=int)}")
contract_codes = table_codes("docs/contract.md", "## Error codes")
fact(set(contract_codes) <= codes, f"docs/contract.md's error table lists codes {sorted(set(contract_codes) - codes)} that error.rs never assigns")
# The refusal of exclusive RDMA netns mode: its variant in add.rs gives the code whose row says so.
add_rs = read("plugin/src/commands/add.rs")
m = re.search(r"Exclusive\) => Err\(Error::(\w+)\(", add_rs)
fact(m is not None, "plugin/src/commands/add.rs: no Error for NetnsMode::Exclusive found")
if m:
    c = variant_code.get(m.group(1), "?")
    fact("exclusive netns mode" in conf_codes.get(c, ""),
         f"docs/configuration.md: the row of code {c} (Error::{m.group(1)}, ADD's answer to exclusive RDMA netns mode) does not say 'exclusive netns mode'")
    for other, row in conf_codes.items():
        fact(other == c or not re.search(r"(?<!is refused before, with \d{3}\) )exclusive (RDMA )?netns mode", row) or "refused before" in row,
             f"docs/configuration.md: code {other}'s row names exclusive netns mode as its cause; ADD answers it with {c}")
# The ifalias: every key ADD writes is in contract.md.
keys = re.findall(r"(\w+)=\{\}", re.search(r'"(rdma_dev=[^"]*)"', read("plugin/src/protocol/cni.rs")).group(1))
keys.append(re.search(r'ATTACHMENT_KEY: &str = "(\w+)"', read("plugin/src/attach/ipvlan.rs")).group(1))
contract = read("docs/contract.md")
for k in keys:
    fact(f"{k}=" in contract, f"docs/contract.md does not name the ifalias key {k}= that ADD writes")
# make fuzz's total time.
mk = read("Makefile")
targets = re.search(r"^FUZZ_TARGETS \?= (.*)$", mk, re.M).group(1).split()
secs = int(re.search(r"^FUZZ_SECONDS \?= (\d+)", mk, re.M).group(1))
m = re.search(r"make fuzz +# each target FUZZ_SECONDS \(default (\d+)\) in turn: (\d+) min", read("docs/fuzzing.md"))
fact(m is not None and int(m.group(1)) == secs and int(m.group(2)) == len(targets) * secs // 60,
     f"docs/fuzzing.md: `make fuzz` takes {len(targets)} targets x {secs} s = {len(targets) * secs // 60} min, "
     f"the page says {m.group(2) + ' min' if m else 'nothing parsable'}")
# The concurrency test's size: its default and make test's.
conc_default = re.search(r"CONC_PODS=\$\{CONC_PODS:-(\d+)\}", read("tests/vm/suite/80-concurrency.sh")).group(1)
conc_test = re.search(r"CONC_PODS=\$\$\{CONC_PODS:-(\d+)\}", mk).group(1)
m = re.search(r"`CONC_PODS` pods \((\d+) by default, (\d+) in `make test`\)", read("docs/testing.md"))
fact(m is not None and m.groups() == (conc_default, conc_test),
     f"docs/testing.md: the concurrency test runs CONC_PODS pods, {conc_default} by default and {conc_test} in make test; "
     f"the page says {m.groups() if m else 'nothing parsable'}")
# README: the examples' image is set once, in examples/kustomization.yaml; so every example that
# names the image is one of its resources.
kust = read("examples/kustomization.yaml")
for ex in sorted(os.listdir("examples")):
    if ex.endswith(".yaml") and ex != "kustomization.yaml" and "ghcr.io/roce-ipvlan/roce-ipvlan" in read(f"examples/{ex}"):
        fact(re.search(rf"^  - {re.escape(ex)}$", kust, re.M) is not None,
             f"examples/{ex} names the plugin's image but is not a resource of examples/kustomization.yaml, whose images: entry sets it")
# The shipped binary's size, when it has been built (make static): within 5 % of the figure.
static = "target/x86_64-unknown-linux-musl/release/roce-ipvlan"
m = re.search(r"about [\d.]+ MB\s+\(([\d ]+) bytes", read("docs/deploy.md"))
fact(m is not None, "docs/deploy.md: no 'about N MB (N bytes' figure for the static binary")
if m and os.path.exists(static):
    quoted, size = int(m.group(1).replace(" ", "")), os.path.getsize(static)
    fact(abs(quoted - size) <= size * 0.05,
         f"docs/deploy.md quotes {quoted} bytes for the static binary; {static} has {size}")

# Error codes quoted in the prose. A quote is "code N", "codes N", "with N", "with code N" or
# "(N" for the plugin's own codes (1xx) and 999; a number followed by a unit is a figure.
quote = re.compile(r"\b(?:[Cc]odes?\s+|with\s+(?:code\s+)?|\()(1\d\d|999)\b"
                   r"(?!\s?(?:s|ms|bytes|KB|MB|min|tests|pods|GIDs|entries|slots)\b)")
m = re.search(r"Exclusive\) => Err\(Error::(\w+)\(", add_rs)
causes = {
    "exclusive netns mode": (r"exclusive (?:RDMA )?netns mode|netns exclusive|exclusive mode", variant_code.get(m.group(1) if m else "", "?")),
    "a full GID table": (r"GID table|GID-table|no room|has room", variant_code.get("GidTableFull", "?")),
    "a failpoint": (r"failpoint", variant_code.get("Io", "?")),
    "DAD or SLAAC": (r"duplicate address detection|dadfailed|\bDAD\b|SLAAC", variant_code.get("Slaac", "?")),
    "the GID wait's timeout": (r"gidTimeoutMs|did not appear", variant_code.get("GidTimeout", "?")),
}
fact("Error::io(" in read("plugin/src/attach/failpoint.rs"),
     "plugin/src/attach/failpoint.rs: a failpoint no longer fails with Error::io (check-docs maps failpoints to Io's code)")
quoted_codes = cause_quotes = 0
for path in files:
    prose = re.sub(r"```.*?```", "", read(path), flags=re.S)
    for para in re.split(r"\n\s*\n|\n\|", prose):
        for sentence in re.split(r"(?<=\.)\s+(?=[A-Z(`*])", para):
            q = set(quote.findall(sentence))
            quoted_codes += len(q)
            short = " ".join(sentence.split())[:160]
            for c in q:
                fact(c in codes, f"{path}: code {c} is quoted but error.rs assigns no such code: {short}")
            if len(q) != 1:
                continue
            c = next(iter(q))
            named = [cause for cause, (rx, _) in causes.items() if re.search(rx, sentence)]
            if len(named) == 1:
                cause_quotes += 1
                fact(causes[named[0]][1] == c,
                     f"{path}: quotes code {c} for {named[0]}, which ADD answers with {causes[named[0]][1]}: {short}")

# make k8s-test's time: the range docs/testing.md gives holds every run it lists, and each listed
# run is one the page reports ("k8s-test N s").
m = re.search(r"the whole `make k8s-test` (\d+) to (\d+) min \(([\d\s,and]+) s measured below\)", testing := read("docs/testing.md"))
fact(m is not None, "docs/testing.md: no 'the whole `make k8s-test` A to B min (N, ... s measured below)' figure")
if m:
    lo, hi = int(m.group(1)), int(m.group(2))
    runs_s = [int(re.sub(r"\s", "", x)) for x in re.split(r",\s*|\s+and\s+", m.group(3).strip())]
    reported = {int(x.replace(" ", "")) for x in re.findall(r"k8s-test\s+(\d[\d ]*\d) s", testing)}
    for r in runs_s:
        fact(lo * 60 <= r <= hi * 60, f"docs/testing.md: k8s-test's {r} s is outside the {lo} to {hi} min it quotes")
        fact(r in reported, f"docs/testing.md: k8s-test's {r} s is not a run the page reports ('k8s-test {r} s')")

# --version's commit: README's order of sources is build.rs's.
build_rs = read("plugin/build.rs")
env_first = re.search(r'var\("ROCE_IPVLAN_COMMIT"\)(?s:.*?)\.or_else\(git_commit\)(?s:.*?)"unknown"', build_rs) is not None
fact(env_first == bool(re.search(r"`ROCE_IPVLAN_COMMIT` at build time when set, else `git rev-parse --short HEAD`, else\s+`unknown`", read("README.md"))),
     "README.md#building: the order of --version's commit sources (ROCE_IPVLAN_COMMIT, git, unknown) is not plugin/build.rs's")
fact(env_first, "plugin/build.rs: ROCE_IPVLAN_COMMIT, then git, then \"unknown\" not found in that order (README.md#building says so)")

# Test counts: what each tier of make test runs, from the files, against SUITE_EXPECT and the docs.
def suite_tests(suite, files=""):
    names = []
    for f in sorted(os.listdir(f"tests/{suite}/suite")):
        if re.match(r"[0-9].*\.sh$", f) and re.search(files, f):
            names += re.findall(r"(?m)^(test_[a-z0-9_]+)", read(f"tests/{suite}/suite/{f}"))
    return names
vm_names = suite_tests("vm")
privileged = sum(len(re.findall(r"#\[ignore\b", read(os.path.join(d, f))))
                 for d, _, fs in os.walk("plugin/src") for f in fs if f.endswith(".rs"))
privileged += len(re.findall(r"#\[ignore\b", read("plugin/tests/privileged.rs")))
runs = {
    # vm-test: the upstream view, no pattern (test_ofed_* skipped)
    "vm-test": sum(1 for t in vm_names if not t.startswith("test_ofed_")),
    "vm-ofed": sum(1 for t in vm_names if t.startswith("test_ofed_")),
    "vm-rust": privileged,
    "fuzz-smoke": len(re.findall(r"(?m)^\[\[bin\]\]", read("fuzz/Cargo.toml"))),
    # fabric-test-flat: FABRIC_LAYOUT=flat, VM_RDMA=ofed; k8s-test: VM_RDMA=ofed
    "fabric-test-flat": sum(1 for t in suite_tests("fabric") if not t.startswith("test_routed6_")),
    # fabric-test-routed6: FABRIC_ROUTED6_TESTS, routed6's own tests (SUITE_EXPECT_ROUTED6)
    "fabric-test-routed6": sum(1 for t in suite_tests("fabric") if t.startswith("test_routed6_")),
    # crd-test: tests/k8s/crd-test.sh's SUITE_FILES ('^90-') on the host, test_crds_* only (K8S_API_ONLY)
    "crd-test": sum(1 for t in suite_tests("k8s", re.search(r"SUITE_FILES='([^']*)'", read("tests/k8s/crd-test.sh")).group(1))
                    if t.startswith("test_crds_")),
    # k8s-test: VM_RDMA=ofed and the files K8S_SUITE_NODE names (SUITE_FILES)
    "k8s-test": sum(1 for t in suite_tests("k8s", re.search(r"(?m)^K8S_SUITE_NODE = (.*)$", mk).group(1))
                    if not t.startswith(("test_upstream_", "test_two_nodes_"))),
    # k8s-test-nodes: K8S_NODES=2, the suite's test_two_nodes_* tests only
    "k8s-test-nodes": sum(1 for t in suite_tests("k8s") if t.startswith("test_two_nodes_")),
}
test_rule = re.search(r"(?ms)^test:\n(.*?)\n\n", mk).group(1)
expect = {t: n for n, t in re.findall(r"SUITE_EXPECT(?:_ROUTED6)?=(\d+) \$\(MAKE\) ([\w-]+)", test_rule)}
for tier, n in runs.items():
    fact(expect.get(tier) == str(n), f"Makefile: make test's SUITE_EXPECT for {tier} is {expect.get(tier, 'not set')}, "
         f"the tier runs {n} (its suite files, skip rules, ignored tests or fuzz targets)")
testing = read("docs/testing.md")
m = re.search(r"\(`SUITE_EXPECT`: ([^;]*);", testing)
fact(m is not None, "docs/testing.md: no '(`SUITE_EXPECT`: ...;' list in make test's row")
if m:
    label = {"fuzz-smoke": "fuzz-smoke", "vm": "vm-test", "vm-rust": "vm-rust", "vm-ofed": "vm-ofed",
             "fabric": "fabric-test-flat", "routed6": "fabric-test-routed6", "k8s": "k8s-test",
             "two-node": "k8s-test-nodes"}
    doc = {label.get(k, k): v for k, v in re.findall(r"([\w-]+) (\d+)", m.group(1))}
    fact(doc == expect, f"docs/testing.md quotes SUITE_EXPECT {doc}, make test sets {expect}")
m = re.search(r"the whole suite \((\d+) tests\)", testing)
fact(m is not None and m.group(1) == str(runs["vm-test"]),
     f"docs/testing.md: the VM suite has {runs['vm-test']} tests, the page says {m.group(1) if m else 'nothing parsable'}")
m = re.search(r"files `00` to `26` \((\d+) tests\s+and the (\d+) of the other RDMA view skipped\) and `27` to `80` \((\d+)\)", testing)
def shard(ere, ofed):
    names = []
    for f in sorted(os.listdir("tests/vm/suite")):
        if re.match(r"[0-9].*\.sh$", f) and re.match(ere, f):
            names += re.findall(r"(?m)^(test_[a-z0-9_]+)", read(f"tests/vm/suite/{f}"))
    return sum(1 for t in names if t.startswith("test_ofed_") == ofed)
# tests/vm/shards.sh's default shards; every file is in one (it checks that before booting)
shards = re.search(r'VM_SHARDS:-(\S+) (\S+)\}', read("tests/vm/shards.sh")).groups()
want = (str(shard(shards[0], False)), str(shard(shards[0], True)), str(shard(shards[1], False)))
fact(m is not None and m.groups() == want,
     f"docs/testing.md: vm-test's shards run {want[0]} (and skip {want[1]}) and {want[2]} tests, the page says {m.groups() if m else 'nothing parsable'}")
routed6 = sum(1 for t in suite_tests("fabric") if t.startswith("test_routed6_"))
# A sentence may wrap anywhere: each space of the pattern matches a line break too, and the
# "# " that starts the next line of a Makefile comment (stop 54's CI failed on a rewrap).
def prose(rx):
    return rx.replace(" ", r"\s+(?:#\s*)?")
for path, rx in (("docs/testing.md", r"routed6's own (\d+) tests"), ("Makefile", r"(\d+) on routed6 \(SUITE_EXPECT_ROUTED6")):
    m = re.search(prose(rx), read(path))
    fact(m is not None and m.group(1) == str(routed6), f"{path}: routed6 has {routed6} tests, the text says {m.group(1) if m else 'nothing parsable'}")
m = re.search(r"SUITE_EXPECT_ROUTED6:-(\d+)", mk)
fact(m is not None and m.group(1) == str(routed6), f"Makefile: fabric-test-routed6's default SUITE_EXPECT_ROUTED6 is {m.group(1) if m else 'not set'}, routed6 has {routed6} tests")

print(f"check-docs: {quoted_codes} error codes quoted in the prose ({cause_quotes} beside the cause they answer); tier sizes {runs}")
print(f"check-docs: {checked_links} relative links, {checked_blocks} configuration blocks, "
      f"{checked_refs} section references from outside docs/, {facts} quoted figures and codes checked")
sys.exit(1 if bad else 0)
PY
