#!/usr/bin/env bash
# make lint: the module table of docs/design.md against plugin/src. plugin/src has one folder per
# layer (FOLDERS; lib.rs declares them) and every module lives in one. Every .rs file must have a
# row, each file's `crate::<folder>::<module>` uses (its `mod tests` aside) must be among its
# row's "may depend on" modules, every such use must point down the layers or stay in its own
# folder (the layer order is the order of the table's sections: a protocol module imports no
# kernel adapter, a kernel adapter nothing of the attachment, and so on), and the modules must
# form no cycle (tsort).
set -euo pipefail
cd "$(dirname "$0")/.."
src=plugin/src
doc=docs/design.md
rc=0
FOLDERS='protocol|kernel|attach|commands|tools'
graph=$(mktemp)
trap 'rm -f "$graph"' EXIT

# The layers, lowest first: the folders in the order the table's rows first name them.
read -r -a LAYERS <<<"$(grep -oE '^\| `('"$FOLDERS"')/' "$doc" | sed -E 's/^\| `//; s/\/$//' | awk '!seen[$0]++' | tr '\n' ' ')"
if [[ ${#LAYERS[@]} -ne $(tr '|' '\n' <<<"$FOLDERS" | grep -c '') ]]; then
	echo "check-modules: $doc's table names the folders ${LAYERS[*]}: expected each of $FOLDERS" >&2
	exit 1
fi
# rank FOLDER: its place in LAYERS (0 lowest)
rank() { local i; for i in "${!LAYERS[@]}"; do [[ ${LAYERS[$i]} == "$1" ]] && echo "$i"; done; }

# row_of FILE: the design.md table row whose first column names FILE (relative to $src)
row_of() { grep -E "^\| [^|]*\`$1\`[^|]*\|" "$doc" | head -n1 || true; }

while read -r file; do
	rel=${file#"$src"/}
	row=$(row_of "$rel")
	if [[ -z $row ]]; then
		echo "check-modules: $rel has no row in $doc's layout table" >&2
		rc=1
		continue
	fi
	[[ $rel == main.rs || $rel == main_annotate.rs || $rel == lib.rs ]] && continue
	allowed=$(awk -F'|' '{print $(NF-1)}' <<<"$row" | tr -cs 'a-z_' '\n')
	if [[ ! $rel =~ ^($FOLDERS)/([a-z_]+) ]]; then
		echo "check-modules: $rel is in none of the layer folders ($FOLDERS)" >&2
		rc=1
		continue
	fi
	folder=${BASH_REMATCH[1]}
	module=${BASH_REMATCH[2]}
	# Code before the unit tests' `mod tests` (a #[cfg(test)] item elsewhere counts), without
	# line comments.
	uses=$(sed '/^mod tests\b/,$d' "$file" | grep -v '^[[:space:]]*//' |
		grep -oE 'crate::[a-z_]+(::[a-z_]+)?' | sed 's/^crate:://' | sort -u || true)
	for path in $uses; do
		if [[ ! $path =~ ^($FOLDERS)::([a-z_]+)$ ]]; then
			echo "check-modules: $rel uses crate::$path, not a module of a layer folder" >&2
			rc=1
			continue
		fi
		dep_folder=${BASH_REMATCH[1]}
		dep=${BASH_REMATCH[2]}
		[[ $dep == "$module" ]] && continue
		if (($(rank "$dep_folder") > $(rank "$folder"))); then
			echo "check-modules: $rel uses crate::$path, an import up the layers (${LAYERS[*]}, lowest first): move the rule it needs down into $folder/ or below" >&2
			rc=1
		fi
		echo "$module $dep" >>"$graph"
		if ! grep -qxF "$dep" <<<"$allowed"; then
			echo "check-modules: $rel uses crate::$path, which its row in $doc does not allow" >&2
			rc=1
		fi
	done
done < <(find "$src" -name '*.rs' -not -path '*/fixtures/*' | sort)

if ! tsort "$graph" >/dev/null 2>&1; then
	echo "check-modules: the modules of $src form a cycle:" >&2
	tsort "$graph" 2>&1 >/dev/null | sed 's/^/  /' >&2
	rc=1
fi
((rc == 0)) && echo "check-modules: $(grep -c '' "$graph") module dependencies, as $doc's table allows, all down the layers (${LAYERS[*]}), no cycle"
exit "$rc"
