#!/usr/bin/env bash
# An agent in bash over slack-handoff's HTTP API (docs/api.md), with curl and jq: it asks a
# person to approve a refund, waits for the decision (long polls: each GET is held until the
# handoff is decided or 30 s pass) and prints it, e.g. "approved by U0DEVREVIEWER", then exits
# 0 whatever the outcome. An HTTP error ends it with status 1 and the problem's detail.
#
# Against `handoff dev` (it writes HANDOFF_API_URL and HANDOFF_API_KEY to .handoff-dev/env),
# in a second terminal, from the same folder:
#
#   set -a && . .handoff-dev/env && set +a && bash examples/http_agent.sh
#
# then click Approve on the new message in the workbench (http://127.0.0.1:3001/).
# HTTP_AGENT_WAIT_SECONDS (default 30, at most 60) sets how long each GET is held.
set -euo pipefail

name=${0##*/}
die() {
  echo "$name: $*" >&2
  exit 1
}

if [[ -z ${HANDOFF_API_URL:-} || -z ${HANDOFF_API_KEY:-} ]]; then
  echo "$name: set HANDOFF_API_URL and HANDOFF_API_KEY (handoff dev writes both to" \
    ".handoff-dev/env: set -a && . .handoff-dev/env && set +a)" >&2
  exit 2
fi
for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "$name: needs $tool on PATH" >&2; exit 2; }
done
api_url=${HANDOFF_API_URL%/}
wait_seconds=${HTTP_AGENT_WAIT_SECONDS:-30}
answer=$(mktemp)
trap 'rm -f "$answer"' EXIT

# api METHOD PATH [curl options...]: the answer's JSON on stdout; on an HTTP error, the
# problem's detail (RFC 9457 problem details) on stderr and exit 1.
api() {
  local method=$1 path=$2 status detail
  shift 2
  status=$(curl -sS --max-time 10 -o "$answer" -w '%{http_code}' -X "$method" \
    -H "Authorization: Bearer $HANDOFF_API_KEY" "$@" "$api_url$path") ||
    die "$method $path: cannot reach $api_url (curl exit status $?)"
  if ((status < 200 || status > 299)); then
    detail=$(jq -r '.detail // .title // empty' "$answer" 2>/dev/null) || detail=""
    [[ -n $detail ]] || detail=$(head -c 300 "$answer")
    die "$method $path: HTTP $status: $detail"
  fi
  cat "$answer"
}

# One run of the agent; the Idempotency-Key makes a retried create (after a lost answer)
# return the same handoff instead of asking twice.
run_id="refund-agent-sh-$(date +%s)-$$"
request=$(jq -n --arg run_id "$run_id" '{
  request_type: "approval",
  run_id: $run_id,
  thread_id: "order-A-1001",
  context: "The customer was charged twice for order A-1001.",
  action: {name: "issue_refund", args: {order_id: "A-1001", amount_usd: 30}}
}')
handoff=$(api POST /v1/handoffs -H 'Content-Type: application/json' \
  -H "Idempotency-Key: $run_id/refund" --data-binary "$request")
id=$(jq -r .id <<<"$handoff")
echo "Waiting for a person to decide $id ..."

while [[ $(jq -r .status <<<"$handoff") == pending ]]; do
  # Held until it is decided or wait_seconds pass; pending still: ask again.
  handoff=$(api GET "/v1/handoffs/$id?wait=$wait_seconds" --max-time $((wait_seconds + 15)))
done
jq -r '"\(.status) by \(.resume_data.decided_by // "nobody")"' <<<"$handoff"
