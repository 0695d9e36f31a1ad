#!/usr/bin/env bash
# Commit messages as the project writes them (git log --oneline, mail and
# review tools show the subject alone): a subject of at most 72 characters,
# then, if there is a body, a blank line before it. Checked for every commit
# after the one that introduced this check; older history stays as it was.
set -euo pipefail
cd "$(dirname "$0")/.."
since=ae0708d48400e054597db331e883fe9bcc4a44e5
if ! git rev-parse -q --verify "$since^{commit}" >/dev/null; then
  echo "check-commits: $since is not in this clone (shallow?): nothing to check"
  exit 0
fi
bad=0
for h in $(git rev-list "$since..HEAD"); do
  subject=$(git log -1 --format=%s "$h")
  second=$(git log -1 --format=%B "$h" | sed -n 2p)
  if [ ${#subject} -gt 72 ]; then
    echo "commit ${h:0:12}: subject is ${#subject} characters (at most 72): $subject"
    bad=1
  fi
  if [ -n "$second" ]; then
    echo "commit ${h:0:12}: no blank line between the subject and the body"
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "check-commits: $(git rev-list --count "$since..HEAD") commits after ${since:0:12} are well formed"
exit $bad
