// A stream session: the play-start, the heartbeat timer, what each answer means for the player,
// and the releases when the page goes away.

import { ScreenlimitError } from "./errors.js";
import { call, errorBody, type Answer, type TokenSource, type Transport } from "./http.js";
import { backoff, jittered, retryAfterMs } from "./timing.js";
import type { ActiveStream, Denial, DeviceType, PlayStartAnswer } from "./types.js";

export type SessionState =
  | "starting"
  | "playing"
  | "denied"
  | "revoked"
  | "released"
  | "stopped";

/** What a session tells its player. */
export interface SessionEvents {
  /** Playing: after the play-start, a take-over, a re-acquire or a resume. */
  playing: { streamId: string; limit: number; activeCount: number; degraded: boolean };
  /** The account is at its limit: show `active` and offer `session.takeOver(streamId)`. */
  denied: { limit: number; rule: string; active: ActiveStream[]; message: string };
  /** Stopped from another device or by support: stop playback. The session is over. */
  revoked: { streamId: string; message: string };
  /** The lease ran out (410 `lease_expired`); `reacquired` says whether a new play-start won. */
  expired: { reacquired: boolean };
  /** The limiter answered without its store (`degraded: true`) or could not answer (503, no
   * answer): keep playing; the session retries with backoff. */
  degraded: { reason: "store_degraded" | "unavailable" | "unreachable"; status: number };
  /** Answers are whole again after `degraded`. */
  recovered: Record<string, never>;
  /** A renewal went through: sent at `sentAt`, answered at `at` (ms since the epoch). */
  heartbeat: { streamId: string; sentAt: number; at: number; degraded: boolean };
  /** The slot was given back because the page was hidden or left (`reason`). */
  released: { reason: "hidden" | "pagehide" };
  /** `session.stop()` finished. */
  stopped: Record<string, never>;
  /** An answer the session cannot act on (a refused token, bad input); it keeps its schedule. */
  error: ScreenlimitError;
}

export type EventName = keyof SessionEvents;
export type Handler<E extends EventName> = (event: SessionEvents[E]) => void;
export type Handlers = { [E in EventName]?: Handler<E> };

/** Page-lifecycle hooks; `null` turns them off (a native shell that calls `stop()` itself). */
export interface PageHooks {
  window: Pick<Window, "addEventListener" | "removeEventListener">;
  document: Pick<Document, "addEventListener" | "removeEventListener" | "visibilityState">;
}

export interface StartStreamOptions {
  /** The limiter (or the gateway in front of it), e.g. `https://limiter.example.com`. */
  baseUrl: string;
  /** A player token (JWT) or gateway token; a function is asked before every call (refresh). */
  token?: TokenSource;
  accountId: string;
  /** Stable across app restarts: a restart then replaces its own earlier stream. */
  deviceId: string;
  deviceType?: DeviceType;
  /** A display name such as "Living Room TV", shown to the other devices in a 409. */
  deviceMeta?: string;
  profileId?: string;
  titleId?: string;
  plan?: string;
  /** Take over this stream (one a 409 listed) in the same play-start. */
  replaceStreamId?: string;
  /** Spread of each heartbeat around the interval, as a fraction (default 0.1: ±10%). */
  jitter?: number;
  /** How long the page may stay hidden before the slot is released (default 60 000 ms). */
  backgroundGraceMs?: number;
  /** Play again when a page hidden past its grace period is shown again (default true). */
  resumeOnVisible?: boolean;
  /** Deadline of one call (default 10 000 ms). */
  timeoutMs?: number;
  /** First retry wait after a 503 or no answer (default 1 000 ms); doubles up to the interval. */
  retryBaseMs?: number;
  /** Play-start attempts before `startStream` gives up on a 503 or no answer (default 4). */
  startAttempts?: number;
  /** Handlers attached before the first call. */
  on?: Handlers;
  /** For tests and other runtimes. */
  fetch?: typeof fetch;
  random?: () => number;
  now?: () => number;
  pageHooks?: PageHooks | null;
}

interface Timers {
  set(fn: () => void, ms: number): ReturnType<typeof setTimeout>;
  clear(id: ReturnType<typeof setTimeout> | undefined): void;
}

const realTimers: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (id) => {
    if (id !== undefined) clearTimeout(id);
  },
};

export class StreamSession {
  state: SessionState = "starting";
  /** The stream's id while playing. */
  streamId: string | undefined;
  /** The last 409, while `denied`. */
  denial: Denial | undefined;
  /** The heartbeat interval the limiter gave (ms). */
  intervalMs = 30_000;
  degraded = false;

  private readonly options: StartStreamOptions;
  private readonly transport: Transport;
  private readonly handlers = new Map<EventName, Set<(event: never) => void>>();
  private readonly random: () => number;
  private readonly now: () => number;
  private readonly timers: Timers;
  private heartbeatTimer: ReturnType<typeof setTimeout> | undefined;
  private hiddenTimer: ReturnType<typeof setTimeout> | undefined;
  private failures = 0;
  private readonly detach: () => void;

  constructor(options: StartStreamOptions, timers: Timers = realTimers) {
    this.options = options;
    this.transport = {
      baseUrl: options.baseUrl,
      token: options.token,
      fetch: options.fetch ?? globalThis.fetch.bind(globalThis),
      timeoutMs: options.timeoutMs ?? 10_000,
    };
    this.random = options.random ?? Math.random;
    this.now = options.now ?? Date.now;
    this.timers = timers;
    for (const [name, handler] of Object.entries(options.on ?? {})) {
      if (handler) this.on(name as EventName, handler as Handler<EventName>);
    }
    this.detach = this.attachPageHooks();
  }

  on<E extends EventName>(name: E, handler: Handler<E>): () => void {
    let set = this.handlers.get(name);
    if (!set) this.handlers.set(name, (set = new Set()));
    set.add(handler as (event: never) => void);
    return () => set?.delete(handler as (event: never) => void);
  }

  private emit<E extends EventName>(name: E, event: SessionEvents[E]): void {
    for (const handler of this.handlers.get(name) ?? []) {
      try {
        (handler as Handler<E>)(event);
      } catch (error) {
        // A player's handler that throws must not stop the heartbeats.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }

  /** Plays, retrying a 503 or no answer; resolves `playing` or `denied`, else throws. */
  async acquire(replaceStreamId?: string): Promise<SessionState> {
    const attempts = Math.max(1, this.options.startAttempts ?? 4);
    for (let attempt = 0; ; attempt++) {
      const answer = await call(this.transport, "POST", ["v1", "streams"], this.playBody(replaceStreamId));
      if (answer.status === 200) {
        this.playing(answer.body as PlayStartAnswer);
        return this.state;
      }
      if (answer.status === 409) {
        this.deny(answer.body as Denial);
        return this.state;
      }
      if (!retryable(answer) || attempt + 1 >= attempts) {
        const body = errorBody(answer);
        throw new ScreenlimitError(answer.status, body.error, body.message, body);
      }
      await this.sleep(backoff(attempt, this.retryBaseMs(), 10_000, this.random, retryAfterMs(answer.retryAfter)));
    }
  }

  /** After a 409: stop `streamId` (one `denial.active` lists) and play here, in one call. */
  takeOver(streamId: string): Promise<SessionState> {
    return this.acquire(streamId);
  }

  /** Plays again after a release (page shown again) or a denial. */
  resume(): Promise<SessionState> {
    return this.acquire();
  }

  /** Stops playing: the slot is free at once. Idempotent. */
  async stop(): Promise<void> {
    const streamId = this.streamId;
    this.halt("stopped");
    this.streamId = undefined;
    this.detach();
    if (streamId) await this.release(streamId, false);
    this.emit("stopped", {});
  }

  private playBody(replaceStreamId?: string): Record<string, unknown> {
    const o = this.options;
    const body: Record<string, unknown> = { account_id: o.accountId, device_id: o.deviceId };
    const optional: [string, unknown][] = [
      ["device_type", o.deviceType],
      ["device_meta", o.deviceMeta],
      ["profile_id", o.profileId],
      ["title_id", o.titleId],
      ["plan", o.plan],
      ["replace_stream_id", replaceStreamId ?? o.replaceStreamId],
    ];
    for (const [key, value] of optional) if (value !== undefined) body[key] = value;
    return body;
  }

  private playing(answer: PlayStartAnswer): void {
    this.state = "playing";
    this.streamId = answer.stream_id;
    this.denial = undefined;
    this.failures = 0;
    this.intervalMs = Math.max(1, answer.heartbeat_interval_sec) * 1000;
    this.emit("playing", {
      streamId: answer.stream_id,
      limit: answer.limit,
      activeCount: answer.active_count,
      degraded: answer.degraded,
    });
    this.markDegraded(answer.degraded ? "store_degraded" : null, 200);
    this.schedule(jittered(this.intervalMs, this.jitter(), this.random));
  }

  private deny(denial: Denial): void {
    this.halt("denied");
    this.streamId = undefined;
    this.denial = denial;
    this.emit("denied", {
      limit: denial.limit,
      rule: denial.rule,
      active: denial.active ?? [],
      message: denial.message,
    });
  }

  private schedule(ms: number): void {
    this.timers.clear(this.heartbeatTimer);
    this.heartbeatTimer = this.timers.set(() => void this.beat(), ms);
  }

  private async beat(): Promise<void> {
    const streamId = this.streamId;
    if (this.state !== "playing" || !streamId) return;
    const sentAt = this.now();
    const answer = await call(this.transport, "PUT", ["v1", "streams", streamId, "heartbeat"], {
      account_id: this.options.accountId,
    });
    // Stopped, released or replaced while the call was out: its answer is moot.
    if (this.state !== "playing" || this.streamId !== streamId) return;
    const body = answer.body as { error?: string; degraded?: boolean } | undefined;
    if (answer.status === 200) {
      this.failures = 0;
      this.emit("heartbeat", { streamId, sentAt, at: this.now(), degraded: Boolean(body?.degraded) });
      this.markDegraded(body?.degraded ? "store_degraded" : null, 200);
      this.schedule(jittered(this.intervalMs, this.jitter(), this.random));
    } else if (answer.status === 410 && body?.error === "stream_revoked") {
      this.halt("revoked");
      this.emit("revoked", { streamId, message: errorBody(answer).message });
    } else if ((answer.status === 410 && body?.error === "lease_expired") || answer.status === 404) {
      // Expired (or unknown to the store after a loss): a new play-start for this device.
      await this.reacquire();
    } else if (retryable(answer)) {
      this.markDegraded(answer.status === 0 ? "unreachable" : "unavailable", answer.status);
      // Retries within the interval keep the lease (its TTL is several intervals).
      const wait = backoff(this.failures++, this.retryBaseMs(), this.intervalMs, this.random, retryAfterMs(answer.retryAfter));
      this.schedule(Math.min(wait, this.intervalMs));
    } else {
      const error = errorBody(answer);
      this.emit("error", new ScreenlimitError(answer.status, error.error, error.message, error));
      this.schedule(jittered(this.intervalMs, this.jitter(), this.random));
    }
  }

  private async reacquire(): Promise<void> {
    try {
      const state = await this.acquire();
      this.emit("expired", { reacquired: state === "playing" });
    } catch (error) {
      this.emit("expired", { reacquired: false });
      if (error instanceof ScreenlimitError) this.emit("error", error);
      // Try again at the next interval rather than give up on the viewer.
      this.state = "playing";
      this.schedule(jittered(this.intervalMs, this.jitter(), this.random));
    }
  }

  private markDegraded(reason: SessionEvents["degraded"]["reason"] | null, status: number): void {
    if (reason && !this.degraded) {
      this.degraded = true;
      this.emit("degraded", { reason, status });
    } else if (!reason && this.degraded) {
      this.degraded = false;
      this.emit("recovered", {});
    }
  }

  private halt(state: SessionState): void {
    this.state = state;
    this.timers.clear(this.heartbeatTimer);
    this.heartbeatTimer = undefined;
    this.timers.clear(this.hiddenTimer);
    this.hiddenTimer = undefined;
  }

  /** Best effort; `keepalive` lets the call outlive the page. */
  private async release(streamId: string, keepalive: boolean): Promise<Answer> {
    return call(this.transport, "DELETE", ["v1", "streams", streamId], { account_id: this.options.accountId }, keepalive);
  }

  private releaseNow(reason: "hidden" | "pagehide"): void {
    const streamId = this.streamId;
    if (this.state !== "playing" || !streamId) return;
    this.halt("released");
    this.streamId = undefined;
    void this.release(streamId, true);
    this.emit("released", { reason });
  }

  private attachPageHooks(): () => void {
    const hooks = this.options.pageHooks === undefined ? defaultHooks() : this.options.pageHooks;
    if (!hooks) return () => {};
    const grace = this.options.backgroundGraceMs ?? 60_000;
    const onPageHide = () => this.releaseNow("pagehide");
    const onPageShow = (event: Event) => {
      if ((event as PageTransitionEvent).persisted && this.state === "released") void this.resumeQuietly();
    };
    const onVisibility = () => {
      if (hooks.document.visibilityState === "hidden") {
        if (this.state !== "playing") return;
        this.timers.clear(this.hiddenTimer);
        this.hiddenTimer = this.timers.set(() => this.releaseNow("hidden"), grace);
      } else {
        this.timers.clear(this.hiddenTimer);
        this.hiddenTimer = undefined;
        if (this.state === "released" && (this.options.resumeOnVisible ?? true)) void this.resumeQuietly();
      }
    };
    hooks.window.addEventListener("pagehide", onPageHide);
    hooks.window.addEventListener("pageshow", onPageShow);
    hooks.document.addEventListener("visibilitychange", onVisibility);
    return () => {
      hooks.window.removeEventListener("pagehide", onPageHide);
      hooks.window.removeEventListener("pageshow", onPageShow);
      hooks.document.removeEventListener("visibilitychange", onVisibility);
    };
  }

  private async resumeQuietly(): Promise<void> {
    try {
      await this.resume();
    } catch (error) {
      if (error instanceof ScreenlimitError) this.emit("error", error);
    }
  }

  private jitter(): number {
    return this.options.jitter ?? 0.1;
  }

  private retryBaseMs(): number {
    return this.options.retryBaseMs ?? 1_000;
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.timers.set(resolve, ms));
  }
}

/** 503, 502, 504, 429 and no answer are worth another try. */
function retryable(answer: Answer): boolean {
  return answer.status === 0 || answer.status === 429 || answer.status === 502 || answer.status === 503 || answer.status === 504;
}

function defaultHooks(): PageHooks | null {
  const g = globalThis as { window?: PageHooks["window"]; document?: PageHooks["document"] };
  return g.window && g.document ? { window: g.window, document: g.document } : null;
}
