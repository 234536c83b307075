import type { ErrorBody } from "./types.js";

/**
 * An answer the session cannot act on by itself: a refused credential (401 `unauthorized`,
 * `invalid_token`, `token_expired`; 403 `account_mismatch`...), bad input (422), or the limiter
 * unreachable after every retry (`code` `unreachable`).
 */
export class ScreenlimitError extends Error {
  /** The HTTP status (0 when no answer came). */
  readonly status: number;
  /** The answer's `error` code, e.g. `token_expired`, `account_mismatch`, `invalid_request`. */
  readonly code: string;
  /** The whole error body, when there was one. */
  readonly body: ErrorBody | undefined;

  constructor(status: number, code: string, message: string, body?: ErrorBody) {
    super(message);
    this.name = "ScreenlimitError";
    this.status = status;
    this.code = code;
    this.body = body;
  }
}
