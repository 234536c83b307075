//! A batch's lease renewals as one command: on a shard of a list whose module has `SL.RENEW`
//! (`path.rs`), the `GETEX` renewals that wait in one batch go as one `SL.RENEW key… ttl`,
//! which does for each key what its `GETEX` would and answers each in order, so Redis pays one
//! command's dispatch, arguments and reply for the batch's renewals instead of one each
//! (BENCHMARKS.md, "Part 5"). One renewal alone stays a `GETEX`. A refused `SL.RENEW` (an
//! older module, an ACL without it) sends its renewals again as their `GETEX`es.

use redis::{Cmd, ServerError, Value};
use tokio::sync::oneshot;

use super::batch::{Job, LeaseRenewal};
use super::native::RENEW_COMMAND;
use crate::store::error::StoreError;

type Answer = oneshot::Sender<Result<Value, StoreError>>;

/// Where each reply of a batch's pipeline goes.
enum Route {
    /// A command of its own: its caller.
    One(Answer),
    /// An `SL.RENEW`: its renewals' callers, in its keys' order, with each `GETEX` kept for a
    /// refusal.
    Renewals(Vec<(Answer, Cmd)>),
}

/// A batch as its pipeline: the commands to send and where their replies go.
pub struct Planned {
    pub commands: Vec<Cmd>,
    routes: Vec<Route>,
}

/// Renewals an `SL.RENEW` did not answer: to send again as their `GETEX`es, and why.
pub struct Refused {
    pub renewals: Vec<(Answer, Cmd)>,
    pub why: Option<ServerError>,
}

/// The pipeline for `jobs`: with `merge`, the renewals of each lease life (one, unless the
/// lease timing was reloaded) as one `SL.RENEW` where the first of them was.
pub fn plan(jobs: Vec<Job>, merge: bool) -> Planned {
    let merge = merge && jobs.iter().filter(|job| job.renewal.is_some()).count() >= 2;
    let mut planned = Planned {
        commands: Vec::with_capacity(jobs.len()),
        routes: Vec::with_capacity(jobs.len()),
    };
    // The open `SL.RENEW` of each lease life: its index in the pipeline.
    let mut open: Vec<(u64, usize)> = Vec::new();
    for job in jobs {
        let Some(LeaseRenewal { key, ttl_ms }) = job.renewal.filter(|_| merge) else {
            planned.push_one(job.command, job.answer);
            continue;
        };
        let at = match open.iter().find(|(ttl, _)| *ttl == ttl_ms) {
            Some(&(_, at)) => at,
            None => {
                open.push((ttl_ms, planned.commands.len()));
                planned.commands.push(redis::cmd(RENEW_COMMAND));
                planned.routes.push(Route::Renewals(Vec::new()));
                planned.commands.len() - 1
            }
        };
        planned.commands[at].arg(key);
        if let Route::Renewals(renewals) = &mut planned.routes[at] {
            renewals.push((job.answer, job.command));
        }
    }
    for (ttl_ms, at) in open {
        planned.commands[at].arg(ttl_ms);
    }
    planned
}

impl Refused {
    /// The refused renewals as a pipeline of their own `GETEX`es.
    pub fn one_by_one(self) -> Planned {
        let mut planned = Planned {
            commands: Vec::with_capacity(self.renewals.len()),
            routes: Vec::with_capacity(self.renewals.len()),
        };
        for (answer, command) in self.renewals {
            planned.push_one(command, answer);
        }
        planned
    }
}

impl Planned {
    fn push_one(&mut self, command: Cmd, answer: Answer) {
        self.commands.push(command);
        self.routes.push(Route::One(answer));
    }

    /// Commands (as the queue counted them: one per job) in the batch.
    pub fn jobs(&self) -> usize {
        self.routes
            .iter()
            .map(|route| match route {
                Route::One(_) => 1,
                Route::Renewals(renewals) => renewals.len(),
            })
            .sum()
    }

    /// Hands each caller its reply (`replies`, one per command, in order); what an
    /// `SL.RENEW` refused comes back to be sent again.
    pub fn answer(self, replies: Vec<Value>) -> Refused {
        let mut refused = Refused {
            renewals: Vec::new(),
            why: None,
        };
        for (route, reply) in self.routes.into_iter().zip(replies) {
            match (route, reply) {
                (Route::One(answer), reply) => {
                    let _ = answer.send(Ok(reply));
                }
                (Route::Renewals(renewals), Value::Array(values))
                    if values.len() == renewals.len() =>
                {
                    for ((answer, _), value) in renewals.into_iter().zip(values) {
                        let _ = answer.send(Ok(value));
                    }
                }
                (Route::Renewals(renewals), reply) => {
                    if let Value::ServerError(error) = reply {
                        refused.why = Some(error);
                    }
                    refused.renewals.extend(renewals);
                }
            }
        }
        refused
    }

    /// Hands every caller `error` (the batch failed as a whole).
    pub fn fail(self, error: &StoreError) {
        for route in self.routes {
            match route {
                Route::One(answer) => {
                    let _ = answer.send(Err(error.clone()));
                }
                Route::Renewals(renewals) => {
                    for (answer, _) in renewals {
                        let _ = answer.send(Err(error.clone()));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::batch::Priority;
    use tokio::time::Instant;

    fn job(
        command: Cmd,
        renewal: Option<LeaseRenewal>,
    ) -> (Job, oneshot::Receiver<Result<Value, StoreError>>) {
        let (answer, reply) = oneshot::channel();
        let job = Job {
            command,
            answer,
            until: Instant::now(),
            priority: Priority::Renewal,
            renewal,
        };
        (job, reply)
    }

    fn renewal(key: &str, ttl_ms: u64) -> (Job, oneshot::Receiver<Result<Value, StoreError>>) {
        let mut getex = redis::cmd("GETEX");
        getex.arg(key).arg("PX").arg(ttl_ms);
        job(
            getex,
            Some(LeaseRenewal {
                key: key.as_bytes().to_vec(),
                ttl_ms,
            }),
        )
    }

    fn other(key: &str) -> (Job, oneshot::Receiver<Result<Value, StoreError>>) {
        job(redis::cmd("GET").arg(key).clone(), None)
    }

    fn text(command: &Cmd) -> String {
        command
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "*".to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn reply(receiver: &mut oneshot::Receiver<Result<Value, StoreError>>) -> Value {
        receiver.try_recv().expect("answered").expect("a reply")
    }

    #[test]
    fn the_renewals_of_a_batch_go_as_one_sl_renew_where_the_first_was() {
        let (a, mut ra) = renewal("a", 1000);
        let (x, mut rx) = other("x");
        let (b, mut rb) = renewal("b", 1000);
        let (c, mut rc) = renewal("c", 2000);
        let (d, mut rd) = renewal("d", 2000);
        let planned = plan(vec![a, x, b, c, d], true);
        let sent: Vec<String> = planned.commands.iter().map(text).collect();
        assert_eq!(sent, ["SL.RENEW a b 1000", "GET x", "SL.RENEW c d 2000"]);
        assert_eq!(planned.jobs(), 5, "the queue's count is kept");
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let refused = planned.answer(vec![
            Value::Array(vec![bulk("1"), Value::Nil]),
            bulk("x"),
            Value::Array(vec![bulk("3"), bulk("4")]),
        ]);
        assert!(refused.renewals.is_empty());
        assert_eq!(reply(&mut ra), bulk("1"));
        assert_eq!(reply(&mut rb), Value::Nil, "a lease gone: as GETEX answers");
        assert_eq!(reply(&mut rx), bulk("x"));
        assert_eq!((reply(&mut rc), reply(&mut rd)), (bulk("3"), bulk("4")));
    }

    #[test]
    fn one_renewal_or_a_shard_without_sl_renew_keeps_each_getex() {
        let (a, _ra) = renewal("a", 1000);
        let (x, _rx) = other("x");
        let one: Vec<String> = plan(vec![a, x], true).commands.iter().map(text).collect();
        assert_eq!(one, ["GETEX a PX 1000", "GET x"]);
        let (a, _ra) = renewal("a", 1000);
        let (b, _rb) = renewal("b", 1000);
        let off: Vec<String> = plan(vec![a, b], false).commands.iter().map(text).collect();
        assert_eq!(off, ["GETEX a PX 1000", "GETEX b PX 1000"]);
    }

    #[test]
    fn a_refused_sl_renew_gives_its_getexes_back() {
        let (a, mut ra) = renewal("a", 1000);
        let (b, _rb) = renewal("b", 1000);
        let planned = plan(vec![a, b], true);
        let unknown = match redis::parse_redis_value(b"-ERR unknown command 'SL.RENEW'\r\n") {
            Ok(Value::ServerError(error)) => error,
            other => panic!("{other:?}"),
        };
        let refused = planned.answer(vec![Value::ServerError(unknown)]);
        let again: Vec<String> = refused.renewals.iter().map(|(_, c)| text(c)).collect();
        assert_eq!(again, ["GETEX a PX 1000", "GETEX b PX 1000"]);
        assert_eq!(
            refused.why.map(|e| e.code().to_owned()).as_deref(),
            Some("ERR")
        );
        assert!(ra.try_recv().is_err(), "not answered yet");
    }
}
