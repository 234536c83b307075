//! A stream session: the heartbeat task (every interval ± jitter), what each answer means, and
//! the stop. The same rules as the JS library (`clients/js/src/session.ts`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::mpsc;

use crate::api::{Client, ClientError, Denial, Granted, HeartbeatOutcome, PlayOutcome, PlayStart};

/// How a session paces itself.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Spread of each heartbeat around the interval, as a fraction (±10% by default).
    pub jitter: f64,
    /// First retry wait after a 503 or no answer; doubles up to the interval.
    pub retry_base: Duration,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            jitter: 0.1,
            retry_base: Duration::from_secs(1),
        }
    }
}

/// What the session tells its player.
#[derive(Debug, Clone)]
pub enum Event {
    /// A renewal went through.
    Heartbeat { degraded: bool },
    /// Answers without the store, a 503 or no answer: keep playing, the session retries.
    Degraded,
    /// Whole answers again.
    Recovered,
    /// The lease ran out; `reacquired` says whether a new play-start won (else `Denied` follows).
    Expired { reacquired: bool },
    /// Stopped from another device or by support: stop playback. The session is over.
    Revoked,
    /// After an expiry, the account was full.
    Denied(Denial),
    /// An answer the session cannot act on (a refused token); it keeps its schedule.
    Error(ClientError),
}

/// The first answer.
#[derive(Debug)]
pub enum Start {
    Playing(Session),
    /// The account is at its limit: show `active`, and take over with
    /// `PlayStart { replace_stream_id, .. }`.
    Denied(Denial),
}

/// A playing stream, renewed in the background until [`Session::stop`] or a revocation.
#[derive(Debug)]
pub struct Session {
    client: Client,
    account_id: String,
    stream_id: Arc<Mutex<String>>,
    events: mpsc::UnboundedReceiver<Event>,
    task: tokio::task::JoinHandle<()>,
}

impl Session {
    /// Plays, retrying a 503 or no answer `attempts` times in all with backoff.
    pub async fn start(
        client: Client,
        request: PlayStart,
        options: SessionOptions,
    ) -> Result<Start, ClientError> {
        let granted = match play_with_retries(&client, &request, &options, 4).await? {
            PlayOutcome::Denied(denial) => return Ok(Start::Denied(denial)),
            PlayOutcome::Granted(granted) => granted,
        };
        let stream_id = Arc::new(Mutex::new(granted.stream_id.clone()));
        let (to_player, events) = mpsc::unbounded_channel();
        let beat = Heartbeats {
            client: client.clone(),
            request: PlayStart {
                replace_stream_id: None,
                ..request.clone()
            },
            options,
            stream_id: stream_id.clone(),
            events: to_player,
            degraded: granted.degraded,
        };
        if granted.degraded {
            let _ = beat.events.send(Event::Degraded);
        }
        let task = tokio::spawn(beat.run(granted));
        Ok(Start::Playing(Session {
            client,
            account_id: request.account_id,
            stream_id,
            events,
            task,
        }))
    }

    /// The stream's id now (a re-acquire after an expiry changes it).
    pub fn stream_id(&self) -> String {
        self.stream_id.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The next event; `None` once the session is over (revoked, or denied after an expiry).
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// Stops the heartbeats and frees the slot at once.
    pub async fn stop(self) -> Result<(), ClientError> {
        self.task.abort();
        let stream_id = self.stream_id();
        self.client.release(&self.account_id, &stream_id).await
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Without `stop` the lease is left to expire; the heartbeats end with the session.
        self.task.abort();
    }
}

async fn play_with_retries(
    client: &Client,
    request: &PlayStart,
    options: &SessionOptions,
    attempts: u32,
) -> Result<PlayOutcome, ClientError> {
    let mut attempt = 0;
    loop {
        match client.play_start(request).await {
            Err(error) if error.is_transient() && attempt + 1 < attempts => {
                tokio::time::sleep(backoff(
                    attempt,
                    options.retry_base,
                    Duration::from_secs(10),
                    &error,
                ))
                .await;
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// `interval` × a uniform factor in [1 − jitter, 1 + jitter].
pub fn jittered(interval: Duration, jitter: f64) -> Duration {
    let spread = jitter.clamp(0.0, 0.5);
    interval.mul_f64(rand::rng().random_range(1.0 - spread..=1.0 + spread))
}

/// The wait before retry `attempt` (0 first): `base` × 2^attempt capped at `cap`, drawn in its
/// upper half, never under the answer's `Retry-After`.
pub fn backoff(attempt: u32, base: Duration, cap: Duration, error: &ClientError) -> Duration {
    let ceiling = base.saturating_mul(1 << attempt.min(20)).min(cap);
    let wait = ceiling.mul_f64(rand::rng().random_range(0.5..=1.0));
    let retry_after = match error {
        ClientError::Refused {
            retry_after: Some(seconds),
            ..
        } => Duration::from_secs(*seconds),
        _ => Duration::ZERO,
    };
    wait.max(retry_after)
}

struct Heartbeats {
    client: Client,
    request: PlayStart,
    options: SessionOptions,
    stream_id: Arc<Mutex<String>>,
    events: mpsc::UnboundedSender<Event>,
    degraded: bool,
}

impl Heartbeats {
    async fn run(mut self, granted: Granted) {
        let mut interval = granted.heartbeat_interval();
        let mut wait = jittered(interval, self.options.jitter);
        let mut failures = 0;
        loop {
            tokio::time::sleep(wait).await;
            wait = jittered(interval, self.options.jitter);
            let stream_id = self.stream_id.lock().map(|s| s.clone()).unwrap_or_default();
            match self
                .client
                .heartbeat(&self.request.account_id, &stream_id)
                .await
            {
                Ok(HeartbeatOutcome::Renewed { degraded }) => {
                    failures = 0;
                    let _ = self.events.send(Event::Heartbeat { degraded });
                    self.mark_degraded(degraded);
                }
                Ok(HeartbeatOutcome::Revoked) => {
                    let _ = self.events.send(Event::Revoked);
                    return;
                }
                // Expired, or unknown after a store loss: a new play-start for this device.
                Ok(HeartbeatOutcome::Expired) => match self.reacquire(interval).await {
                    Some(new_interval) => interval = new_interval,
                    None => return,
                },
                Err(error) if error.code() == Some("unknown_stream") => {
                    match self.reacquire(interval).await {
                        Some(new_interval) => interval = new_interval,
                        None => return,
                    }
                }
                Err(error) if error.is_transient() => {
                    self.mark_degraded(true);
                    // Retries within the interval keep the lease (its TTL is several intervals).
                    wait =
                        backoff(failures, self.options.retry_base, interval, &error).min(interval);
                    failures += 1;
                }
                Err(error) => {
                    let _ = self.events.send(Event::Error(error));
                }
            }
        }
    }

    /// A new play-start after an expiry: the new interval, or `None` when the session is over.
    async fn reacquire(&mut self, interval: Duration) -> Option<Duration> {
        match self.client.play_start(&self.request).await {
            Ok(PlayOutcome::Granted(granted)) => {
                if let Ok(mut id) = self.stream_id.lock() {
                    *id = granted.stream_id.clone();
                }
                let _ = self.events.send(Event::Expired { reacquired: true });
                self.mark_degraded(granted.degraded);
                Some(granted.heartbeat_interval())
            }
            Ok(PlayOutcome::Denied(denial)) => {
                let _ = self.events.send(Event::Expired { reacquired: false });
                let _ = self.events.send(Event::Denied(denial));
                None
            }
            Err(error) => {
                // Try again at the next heartbeat rather than give up on the viewer.
                let _ = self.events.send(Event::Error(error));
                Some(interval)
            }
        }
    }

    fn mark_degraded(&mut self, degraded: bool) {
        if degraded != self.degraded {
            self.degraded = degraded;
            let _ = self.events.send(if degraded {
                Event::Degraded
            } else {
                Event::Recovered
            });
        }
    }
}
