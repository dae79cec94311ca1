#!/usr/bin/env bash
# The README's lists of what scripts/setup installs name every package it
# installs (scripts/setup --list, with --bench and --screenshot), so they cannot
# drift apart again. Usage: readme_packages.sh REPO_ROOT
set -euo pipefail
root=$1
missing=()
while read -r p; do
  grep -qF -- "\`$p\`" "$root/README.md" || missing+=("$p")
done < <("$root/scripts/setup" --list --bench --screenshot)
if ((${#missing[@]})); then
  echo "README.md does not name these packages that scripts/setup installs: ${missing[*]}" >&2
  exit 1
fi
echo "README.md names all $("$root/scripts/setup" --list --bench --screenshot | wc -l) packages of scripts/setup --bench --screenshot"
