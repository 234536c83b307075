//! screenlimit's player half for native players, gateways and tools: [`Client`] makes each call
//! of the stream API with typed answers; [`Session`] keeps a play alive (heartbeats every
//! interval ± jitter, a new play-start on `lease_expired`, stop on `stream_revoked`, backoff
//! on 503 or no answer, `degraded` when the limiter answers without its store) until
//! [`Session::stop`] frees the slot.
//!
//! ```no_run
//! # async fn run() -> Result<(), screenlimit_client::ClientError> {
//! use screenlimit_client::{Client, Event, PlayStart, Session, SessionOptions, Start};
//! let client = Client::new("http://127.0.0.1:8080", Some("player-token".into()), std::time::Duration::from_secs(5))?;
//! match Session::start(client, PlayStart::new("acct-1", "tv-1"), SessionOptions::default()).await? {
//!     Start::Denied(denial) => println!("full: {:?}", denial.active),
//!     Start::Playing(mut session) => {
//!         while let Some(event) = session.next_event().await {
//!             if matches!(event, Event::Revoked) { break; }
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```

pub mod api;
pub mod session;

pub use api::{
    AccountStreams, ActiveStream, Client, ClientError, Denial, Granted, HeartbeatOutcome,
    PlayOutcome, PlayStart, Shadow,
};
pub use session::{Event, Session, SessionOptions, Start};
