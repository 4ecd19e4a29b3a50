/**
 * An agent in TypeScript over slack-handoff's HTTP API (docs/api.md), with plain `fetch` (no
 * SDK; Node 18 or later): it asks a person to approve a refund, waits for the decision (long
 * polls: each GET is held until the handoff is decided or 30 s pass) and prints it, e.g.
 * "approved by U0DEVREVIEWER", then exits 0 whatever the outcome. An HTTP error ends it with
 * status 1 and the problem's detail.
 *
 * Against `handoff dev` (it writes HANDOFF_API_URL and HANDOFF_API_KEY to .handoff-dev/env),
 * in a second terminal, from the same folder:
 *
 *   set -a && . .handoff-dev/env && set +a
 *   npx --yes -p typescript@5 tsc --target es2022 --module nodenext --outDir /tmp/http-agent examples/http_agent.ts
 *   node /tmp/http-agent/http_agent.js
 *
 * (or with any TypeScript runner, e.g. `npx --yes tsx examples/http_agent.ts`), then click
 * Approve on the new message in the workbench (http://127.0.0.1:3001/).
 * HTTP_AGENT_WAIT_SECONDS (default 30, at most 60) sets how long each GET is held. It needs no
 * @types/node: the little of Node it uses is declared below.
 */

interface NodeProcess {
  env: Record<string, string | undefined>;
  exitCode?: number;
}
const nodeProcess = (globalThis as unknown as { process: NodeProcess }).process;

/** A handoff as the API answers it (the fields this agent reads). */
interface Handoff {
  id: string;
  status: string; // pending, then approved, rejected, answered, expired, cancelled or undeliverable
  resume_data: { decided_by: string; comment: string | null } | null;
}

/** RFC 9457 problem details: what the API answers on an error. */
interface Problem {
  title?: string;
  detail?: string;
  errors?: { field: string; message: string }[];
}

class ApiError extends Error {}

const apiUrl = (nodeProcess.env.HANDOFF_API_URL ?? "").replace(/\/+$/, "");
const apiKey = nodeProcess.env.HANDOFF_API_KEY ?? "";
const waitSeconds = Number(nodeProcess.env.HTTP_AGENT_WAIT_SECONDS ?? 30);

/** Call the API; the answer's JSON, or an ApiError with the problem's detail. */
async function api(
  method: "GET" | "POST",
  path: string,
  options: { body?: unknown; headers?: Record<string, string>; timeoutSeconds?: number } = {},
): Promise<Handoff> {
  const headers: Record<string, string> = { Authorization: `Bearer ${apiKey}`, ...options.headers };
  if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
  }
  let response: Response;
  try {
    response = await fetch(apiUrl + path, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      signal: AbortSignal.timeout((options.timeoutSeconds ?? 10) * 1000),
    });
  } catch (error) {
    throw new ApiError(`${method} ${path}: cannot reach ${apiUrl} (${reason(error)})`);
  }
  const text = await response.text();
  if (!response.ok) {
    let detail = text.slice(0, 300);
    try {
      const problem = JSON.parse(text) as Problem;
      detail = problem.detail ?? problem.title ?? detail;
    } catch {
      // not problem details (a proxy's error page, say): its first bytes are the detail
    }
    throw new ApiError(`${method} ${path}: HTTP ${response.status}: ${detail}`);
  }
  return JSON.parse(text) as Handoff;
}

function reason(error: unknown): string {
  if (!(error instanceof Error)) {
    return String(error);
  }
  // fetch's "fetch failed" has the socket's error (ECONNREFUSED ...) as its cause.
  return error.cause instanceof Error ? error.cause.message : error.message;
}

async function main(): Promise<number> {
  if (!apiUrl || !apiKey) {
    console.error(
      "http_agent: set HANDOFF_API_URL and HANDOFF_API_KEY (handoff dev writes both to " +
        ".handoff-dev/env: set -a && . .handoff-dev/env && set +a)",
    );
    return 2;
  }
  // One run of the agent; the Idempotency-Key makes a retried create (after a lost answer)
  // return the same handoff instead of asking twice.
  const runId = `refund-agent-ts-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
  let handoff = await api("POST", "/v1/handoffs", {
    headers: { "Idempotency-Key": `${runId}/refund` },
    body: {
      request_type: "approval",
      run_id: runId,
      thread_id: "order-A-1001",
      context: "The customer was charged twice for order A-1001.",
      action: { name: "issue_refund", args: { order_id: "A-1001", amount_usd: 30 } },
    },
  });
  console.log(`Waiting for a person to decide ${handoff.id} ...`);

  while (handoff.status === "pending") {
    // Held until it is decided or waitSeconds pass; pending still: ask again.
    const path = `/v1/handoffs/${encodeURIComponent(handoff.id)}?wait=${waitSeconds}`;
    handoff = await api("GET", path, { timeoutSeconds: waitSeconds + 15 });
  }
  console.log(`${handoff.status} by ${handoff.resume_data?.decided_by ?? "nobody"}`);
  return 0;
}

main().then(
  (code) => {
    nodeProcess.exitCode = code;
  },
  (error: unknown) => {
    console.error(`http_agent: ${error instanceof Error ? error.message : String(error)}`);
    nodeProcess.exitCode = 1;
  },
);
