// screenlimit's player half: `startStream` takes a slot for this device and keeps it while the
// viewer watches (heartbeats every interval ± jitter), says when it is lost (`revoked`,
// `expired`) or refused (`denied` with the active devices, `takeOver`), keeps playing through a
// limiter without its store (`degraded`), and gives the slot back when the page goes away.

import { StreamSession, type StartStreamOptions } from "./session.js";

export { ScreenlimitError } from "./errors.js";
export { StreamSession } from "./session.js";
export type {
  EventName,
  Handler,
  Handlers,
  PageHooks,
  SessionEvents,
  SessionState,
  StartStreamOptions,
} from "./session.js";
export type { ActiveStream, Denial, DeviceType, ErrorBody, PlayStartAnswer } from "./types.js";
export { backoff, jittered } from "./timing.js";

/**
 * Starts a play. Resolves once the limiter has answered: `session.state` is `playing` (the
 * heartbeats run) or `denied` (`session.denial.active` lists the devices; `session.takeOver(id)`
 * plays here instead). Rejects with a `ScreenlimitError` when the answer is a refusal it cannot
 * act on (a bad token, bad input) or when no answer came after `startAttempts` tries.
 */
export async function startStream(options: StartStreamOptions): Promise<StreamSession> {
  const session = new StreamSession(options);
  try {
    await session.acquire();
  } catch (error) {
    await session.stop().catch(() => undefined);
    throw error;
  }
  return session;
}
