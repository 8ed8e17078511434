#!/usr/bin/env bash
# Audits the hygiene of the tracked files with the file rules the pre-commit hook applies
# (.githooks/_policy.sh): no absolute machine paths, private keys or obvious secrets, no
# caches, virtual environments or build outputs, no key stores or environment files, no
# absolute symlinks and no oversized files.
#
# Usage:
#   scripts/audit-hygiene.sh              the files in the index, as `git ls-files` lists them
#   scripts/audit-hygiene.sh --worktree   the working tree as `git add -A` would stage it:
#                                         tracked files as they are on disk, plus untracked
#                                         files that are not ignored
#
# The audit leaves the repository as it found it: the trees (and, with --worktree, the blobs)
# it builds go to a temporary object directory that borrows the repository's objects as an
# alternate, and it reads and stages into a copy of the index, never the real one.
set -euo pipefail

usage() {
  sed -n '/^# Usage:/,/^#$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=.githooks/_policy.sh
source "$here/../.githooks/_policy.sh"

mode=index
case ${1:-} in
  "") ;;
  --worktree) mode=worktree ;;
  *) usage ;;
esac
(($# <= 1)) || usage

cd "$(git rev-parse --show-toplevel)"
scratch=$(mktemp -d)
trap 'rm -rf -- "$scratch"' EXIT
objects=$(cd "$(git rev-parse --git-path objects)" && pwd)
mkdir "$scratch/objects"
export GIT_OBJECT_DIRECTORY="$scratch/objects"
export GIT_ALTERNATE_OBJECT_DIRECTORIES="$objects"
# Even `git write-tree` records what it computed in the index, so it works on a copy.
index=$(git rev-parse --git-path index)
if [[ -f $index ]]; then
  cp -- "$index" "$scratch/index"
fi
export GIT_INDEX_FILE="$scratch/index"
if [[ $mode == worktree ]]; then
  git add -A
  where="working tree"
else
  where="index"
fi
tree=$(git write-tree)

files=$(git ls-tree -r --full-tree --name-only -z "$tree" | tr -dc '\0' | wc -c)
if policy_check_tree "$where" "$tree"; then
  echo "audit-hygiene: $((files)) file(s) in the $where follow the repository policy"
else
  echo "audit-hygiene: files in the $where break the repository policy (see above)" >&2
  exit 1
fi
