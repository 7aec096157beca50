#!/usr/bin/env bash
# Commit subjects of at most 72 characters (details go in the body), checked on every commit made since
# the rule began (BASE below; older history is left as it was). `.ci/run` calls it; the same check runs
# as a commit-msg hook after `git config core.hooksPath scripts/hooks`.
# Usage: check-commit-subjects.sh [RANGE]   (default: BASE..HEAD)
set -euo pipefail
cd "$(dirname "$0")/.."
readonly BASE=4859018bebf18a437d267d9c46b99568ee8e9b8e
readonly MAX=72
range="${1:-}"
if [[ -z "$range" ]]; then
  if ! git cat-file -e "${BASE}^{commit}" 2>/dev/null; then
    echo "check-commit-subjects: skipped: commit ${BASE:0:7} (where the rule begins) is not in this clone"
    exit 0
  fi
  range="$BASE..HEAD"
fi
bad=0
while IFS=$'\t' read -r hash subject; do
  if (( ${#subject} > MAX )); then
    echo "check-commit-subjects: ${hash:0:7}: subject of ${#subject} characters (at most $MAX): $subject" >&2
    bad=$((bad + 1))
  fi
done < <(git log --no-merges --format='%H%x09%s' "$range")
count=$(git rev-list --no-merges --count "$range")
if (( bad > 0 )); then
  echo "check-commit-subjects: $bad of $count commit(s) in $range have a subject over $MAX characters" >&2
  exit 1
fi
echo "check-commit-subjects: $count commit(s) in $range, every subject at most $MAX characters"
