// When the next call goes: heartbeats spread by jitter so that players started together do not
// renew together; retries spaced by capped exponential backoff.

/** `intervalMs` × a uniform factor in [1 − jitter, 1 + jitter]. */
export function jittered(intervalMs: number, jitter: number, random: () => number): number {
  const spread = Math.min(Math.max(jitter, 0), 0.5);
  return intervalMs * (1 - spread + 2 * spread * random());
}

/**
 * The wait before retry number `attempt` (0 first): `baseMs` × 2^attempt, capped at `capMs`,
 * then drawn in its upper half ("equal jitter"), and never under the server's `Retry-After`.
 */
export function backoff(
  attempt: number,
  baseMs: number,
  capMs: number,
  random: () => number,
  retryAfterMs = 0,
): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(attempt, 30));
  const wait = ceiling / 2 + (ceiling / 2) * random();
  return Math.max(wait, retryAfterMs);
}

/** A `Retry-After` header in milliseconds (seconds form only; 0 when absent or unreadable). */
export function retryAfterMs(header: string | null): number {
  if (!header) return 0;
  const seconds = Number(header.trim());
  return Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 0;
}
