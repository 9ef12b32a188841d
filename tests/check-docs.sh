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
#      exists (a renamed section otherwise leaves comments pointing nowhere).
#   tests/check-docs.sh      Environment: ROCE_IPVLAN_BIN (default target/debug/roce-ipvlan).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bin=${ROCE_IPVLAN_BIN:-$repo/target/debug/roce-ipvlan}
[[ -x $bin ]] || { echo "check-docs: $bin not found; run 'make build'" >&2; exit 1; }
mapfile -t others < <(git ls-files deploy charts examples Makefile plugin tests bench | grep -v '^tests/validate-fixtures/')
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
print(f"check-docs: {checked_links} relative links, {checked_blocks} configuration blocks, "
      f"{checked_refs} section references from outside docs/ checked")
sys.exit(1 if bad else 0)
PY
