// The limiter's answers, as its OpenAPI document (/openapi.json) gives them.

export type DeviceType = "tv" | "mobile" | "tablet" | "web" | "console" | "other";

/** One stream holding a slot, as a 409 or a list shows it. */
export interface ActiveStream {
  stream_id: string;
  device_id: string;
  device_type: DeviceType;
  device_meta: string;
  profile_id: string;
  title_id: string;
  started_at: string;
  last_seen: string;
  expires_at: string;
}

/** `200` to a play-start. */
export interface PlayStartAnswer {
  stream_id: string;
  lease_ttl_sec: number;
  heartbeat_interval_sec: number;
  limit: number;
  active_count: number;
  degraded: boolean;
}

/** `409` to a play-start: the account is at its limit. */
export interface Denial {
  error: "concurrent_stream_limit";
  message: string;
  limit: number;
  /** `max_streams` or `device_type_cap`. */
  rule: string;
  device_type?: DeviceType | null;
  cap?: number | null;
  /** The streams holding the slots: offer "stop one" (`session.takeOver(streamId)`). */
  active: ActiveStream[];
}

/** Every error answer: `{error, message, ...}`. */
export interface ErrorBody {
  error: string;
  message: string;
  action?: string;
  field?: string;
  reason?: string;
  [extra: string]: unknown;
}
