// One call to the limiter: URL from encoded segments, the credential, a deadline, the answer read
// as JSON whatever its status.

import type { ErrorBody } from "./types.js";

export type TokenSource = string | (() => string | Promise<string>);

export interface Transport {
  baseUrl: string;
  token: TokenSource | undefined;
  fetch: typeof fetch;
  timeoutMs: number;
}

export interface Answer {
  /** 0: no answer (network error, deadline). */
  status: number;
  body: unknown;
  retryAfter: string | null;
}

/** `baseUrl` joined with each segment, percent-encoded. */
export function url(baseUrl: string, ...segments: string[]): string {
  return baseUrl.replace(/\/+$/, "") + "/" + segments.map(encodeURIComponent).join("/");
}

export async function headers(token: TokenSource | undefined): Promise<Record<string, string>> {
  const out: Record<string, string> = { "content-type": "application/json" };
  const value = typeof token === "function" ? await token() : token;
  if (value) out.authorization = `Bearer ${value}`;
  return out;
}

export async function call(
  transport: Transport,
  method: string,
  path: string[],
  body: unknown,
  keepalive = false,
): Promise<Answer> {
  const controller = typeof AbortController === "function" ? new AbortController() : undefined;
  const timer = setTimeout(() => controller?.abort(), transport.timeoutMs);
  try {
    const response = await transport.fetch(url(transport.baseUrl, ...path), {
      method,
      headers: await headers(transport.token),
      body: body === undefined ? undefined : JSON.stringify(body),
      keepalive,
      signal: controller?.signal,
      // Bearer tokens only: no cookies to or from the limiter.
      credentials: "omit",
    });
    let parsed: unknown = undefined;
    try {
      parsed = await response.json();
    } catch {
      parsed = undefined;
    }
    return { status: response.status, body: parsed, retryAfter: response.headers.get("retry-after") };
  } catch {
    return { status: 0, body: undefined, retryAfter: null };
  } finally {
    clearTimeout(timer);
  }
}

export function errorBody(answer: Answer): ErrorBody {
  const body = answer.body as Partial<ErrorBody> | undefined;
  if (body && typeof body.error === "string") {
    return { ...body, error: body.error, message: String(body.message ?? "") };
  }
  return {
    error: answer.status === 0 ? "unreachable" : "unexpected_answer",
    message: answer.status === 0 ? "the limiter did not answer" : `HTTP ${answer.status}`,
  };
}
