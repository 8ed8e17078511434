#!/usr/bin/env bash
# Audits the commits of a push or a pull request with the rules the git hooks apply locally
# (.githooks/_policy.sh): maintainer identity as author and committer, no merge commits,
# Conventional Commit subjects, no generated trailers, and clean files in every commit.
#
# Usage:
#   scripts/audit-attribution.sh [--identity-rev REV] RANGE
#   scripts/audit-attribution.sh [--identity-rev REV] --push BEFORE AFTER
#
# RANGE is anything `git rev-list` accepts: BASE..HEAD for a pull request, or one commit to
# audit its whole history. --push takes a push event's before and after commits; a new branch
# (BEFORE all zeros) or a BEFORE this clone does not have (a force push) audits the whole
# history of AFTER. --identity-rev reads the maintainer identity from that revision instead
# of the working tree, so a pull request cannot approve itself by editing the identity file.
set -euo pipefail

usage() {
  sed -n '/^# Usage:/,/^#$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=.githooks/_policy.sh
source "$here/../.githooks/_policy.sh"

identity_rev=
revs=()
while (($# > 0)); do
  case $1 in
    --identity-rev)
      (($# >= 2)) || usage
      identity_rev=$2
      shift 2
      ;;
    --push)
      (($# == 3)) || usage
      while IFS= read -r arg; do
        revs+=("$arg")
      done <<<"$(policy_push_revs "$2" "$3")"
      shift 3
      ;;
    -h | --help) usage ;;
    -*) usage ;;
    *)
      (($# == 1)) || usage
      revs=("$1")
      shift
      ;;
  esac
done
((${#revs[@]} > 0)) || usage

cd "$(git rev-parse --show-toplevel)"
if [[ -n $identity_rev ]]; then
  policy_load_identity_at "$identity_rev"
else
  policy_load_identity
fi
if count=$(policy_audit_revs "${revs[@]}"); then
  echo "audit-attribution: $count commit(s) in ${revs[*]} follow the repository policy"
else
  echo "audit-attribution: commits in ${revs[*]} break the repository policy (see above)" >&2
  exit 1
fi
