//! Roaming heartbeats, batched: the renewals of streams homed at one peer wait up to
//! `regions.heartbeat_window` for each other and travel as one call (or at once when
//! [`MAX_BATCH`] wait), so the calls to a peer follow the window, not the heartbeat rate. Each
//! renewal gets its own answer back.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::peer::Peer;
use super::wire::{AccountStream, Heartbeats, MAX_BATCH, Op};
use crate::model::HeartbeatOutcome;
use crate::store::StoreError;

type Answer = Result<HeartbeatOutcome, StoreError>;
type Waiting = Vec<(AccountStream, oneshot::Sender<Answer>)>;

pub struct HeartbeatBatch {
    peer: Arc<Peer>,
    window: Duration,
    waiting: Arc<Mutex<Waiting>>,
}

impl HeartbeatBatch {
    pub fn new(peer: Arc<Peer>, window: Duration) -> HeartbeatBatch {
        HeartbeatBatch {
            peer,
            window,
            waiting: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Renews `renewal`'s lease at the peer with the others of its window.
    pub async fn renew(&self, renewal: AccountStream) -> Answer {
        let (answer, answered) = oneshot::channel();
        let waiting = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            waiting.push((renewal, answer));
            waiting.len()
        };
        // The first of a window sends it when the window ends; a full batch goes at once. The
        // send is a task of its own: a caller that gives up must not strand the others.
        if waiting == 1 || waiting >= MAX_BATCH {
            let delay = if waiting >= MAX_BATCH {
                Duration::ZERO
            } else {
                self.window
            };
            let (peer, queue) = (self.peer.clone(), self.waiting.clone());
            tokio::spawn(async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let mut batch =
                    std::mem::take(&mut *queue.lock().unwrap_or_else(|p| p.into_inner()));
                // More than a batch can have gathered before this task ran: each call carries
                // at most a batch, and they go together.
                let mut calls = Vec::new();
                while !batch.is_empty() {
                    let rest = batch.split_off(batch.len().min(MAX_BATCH));
                    calls.push(send(&peer, std::mem::replace(&mut batch, rest)));
                }
                futures::future::join_all(calls).await;
            });
        }
        answered.await.unwrap_or_else(|_| {
            Err(StoreError::Region {
                region: self.peer.name.clone(),
                message: "the renewal's batch was dropped".into(),
            })
        })
    }
}

async fn send(peer: &Arc<Peer>, batch: Waiting) {
    if batch.is_empty() {
        return;
    }
    let (renewals, answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    let count = renewals.len();
    let body = Heartbeats { renewals };
    let outcomes = match peer
        .call::<_, Vec<Answer>>(Op::Heartbeats, &body, count)
        .await
    {
        Ok(outcomes) if outcomes.len() == count => outcomes,
        Ok(outcomes) => {
            let error = StoreError::Region {
                region: peer.name.clone(),
                message: format!("{} answers to {count} renewals", outcomes.len()),
            };
            vec![Err(error); count]
        }
        Err(error) => vec![Err(error); count],
    };
    for (answer, outcome) in answers.into_iter().zip(outcomes) {
        let _ = answer.send(outcome);
    }
}
