//! What one region asks another (`POST /v1/regions/<op>`, JSON): the store operation as the
//! store takes it, and the store's answer or its error (`{"Ok": …}` / `{"Err": …}`). Every
//! request is checked by the id rules before it reaches the store, as the public API checks its
//! own: a peer holds a credential, but what it sends is still input.

use serde::{Deserialize, Serialize};

use crate::api::limits::{ACTOR, MAX_OVERRIDE_SEC, REASON};
use crate::config::MAX_STREAMS_CEILING;
use crate::ids::{DEVICE_META, StreamRef, validate_text, validate_token};
use crate::model::{AcquireCmd, AuditKind, Device, ForceStopCmd, OverrideCmd, Plan};

/// Where the region routes start; an operation's path is this and its name.
pub const PATH_PREFIX: &str = "/v1/regions/";

/// The operations, by the last segment of their path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Acquire,
    Heartbeats,
    Release,
    ForceStop,
    List,
    History,
    Override,
    Audit,
    /// Whether the peer answers (a probe while it is taken as unreachable).
    Ping,
    /// The streams a region let play while the home did not answer, oldest first: each renewed
    /// or taken back at the home in that order, as long as the account has room.
    Report,
}

impl Op {
    pub const ALL: [Op; 10] = [
        Op::Acquire,
        Op::Heartbeats,
        Op::Release,
        Op::ForceStop,
        Op::List,
        Op::History,
        Op::Override,
        Op::Audit,
        Op::Ping,
        Op::Report,
    ];

    /// Its route: [`PATH_PREFIX`] and its name.
    pub fn path(self) -> String {
        format!("{PATH_PREFIX}{}", self.name())
    }

    /// The path segment, and the `op` label of the region metrics.
    pub fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Heartbeats => "heartbeats",
            Op::Release => "release",
            Op::ForceStop => "force-stop",
            Op::List => "list",
            Op::History => "history",
            Op::Override => "override",
            Op::Audit => "audit",
            Op::Ping => "ping",
            Op::Report => "report",
        }
    }
}

/// Most renewals one heartbeats call carries.
pub const MAX_BATCH: usize = 512;
/// Largest body a region call sends or takes: a full batch of renewals with room to spare.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Most history or audit entries one call asks for.
pub const MAX_ENTRIES: usize = 1000;

/// A stream of an account: a heartbeat's or a stop's subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountStream {
    pub account_id: String,
    pub stream: StreamRef,
    /// A heartbeat's: the account's home moved to the callee less than a lease TTL ago, as the
    /// caller's homes say (they know the home its sources named), so it re-registers even at
    /// the limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learning: bool,
}

/// The renewals of roaming streams homed at the callee, gathered over one window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeats {
    pub renewals: Vec<AccountStream>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccountQuery {
    pub account_id: String,
    /// Entries asked for (history).
    #[serde(default)]
    pub limit: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditQuery {
    pub account_id: String,
    pub kind: Option<AuditKind>,
    pub limit: usize,
}

/// Why a region call's body was refused: the field and the rule.
pub type Refusal = (&'static str, String);

fn id(field: &'static str, value: &str) -> Result<(), Refusal> {
    validate_token(value).map_err(|e| (field, e.to_string()))
}

fn optional_id(field: &'static str, value: &str) -> Result<(), Refusal> {
    if value.is_empty() {
        return Ok(());
    }
    id(field, value)
}

fn plan(field: &'static str, name: &str, limit: u32) -> Result<(), Refusal> {
    id(field, name)?;
    if !(1..=MAX_STREAMS_CEILING).contains(&limit) {
        return Err((
            field,
            format!("limit {limit}; use 1 to {MAX_STREAMS_CEILING}"),
        ));
    }
    Ok(())
}

fn device(device: &Device) -> Result<(), Refusal> {
    id("device.id", &device.id)?;
    optional_id("device.profile_id", &device.profile_id)?;
    optional_id("device.title_id", &device.title_id)?;
    validate_text(&DEVICE_META, &device.meta).map_err(|e| ("device.meta", e.to_string()))
}

fn stream(stream: &StreamRef) -> Result<(), Refusal> {
    id("stream.device_id", &stream.device_id)?;
    plan("stream.plan", &stream.plan.name, stream.plan.limit)
}

fn note(actor: &str, reason: &str) -> Result<(), Refusal> {
    validate_text(&ACTOR, actor).map_err(|e| ("actor", e.to_string()))?;
    if reason.chars().count() > REASON.max_chars
        || reason.chars().any(|c| c.is_control() && c != '\n')
    {
        return Err(("reason", REASON.words.to_owned()));
    }
    Ok(())
}

/// A request a region takes, checked before its store sees it.
pub trait Checked {
    fn check(&self) -> Result<(), Refusal>;
}

impl Checked for AcquireCmd {
    fn check(&self) -> Result<(), Refusal> {
        id("account_id", &self.account_id)?;
        device(&self.device)?;
        if let Some(Plan {
            name,
            limit,
            device_caps,
        }) = &self.plan
        {
            plan("plan", name, *limit)?;
            if device_caps.0.iter().any(|&cap| u32::from(cap) > *limit) {
                return Err(("plan.device_caps", "a cap above the plan's limit".into()));
            }
        }
        self.replace.as_ref().map_or(Ok(()), stream)
    }
}

impl Checked for AccountStream {
    fn check(&self) -> Result<(), Refusal> {
        id("account_id", &self.account_id)?;
        stream(&self.stream)
    }
}

impl Checked for Heartbeats {
    fn check(&self) -> Result<(), Refusal> {
        if self.renewals.len() > MAX_BATCH {
            return Err(("renewals", format!("at most {MAX_BATCH} per call")));
        }
        self.renewals.iter().try_for_each(Checked::check)
    }
}

impl Checked for ForceStopCmd {
    fn check(&self) -> Result<(), Refusal> {
        id("account_id", &self.account_id)?;
        stream(&self.stream)?;
        validate_text(&crate::ids::STREAM_ID, &self.stream_id)
            .map_err(|e| ("stream_id", e.to_string()))?;
        note(&self.actor, &self.reason)
    }
}

impl Checked for OverrideCmd {
    fn check(&self) -> Result<(), Refusal> {
        id("account_id", &self.account_id)?;
        if let Some(grant) = &self.grant {
            if !(1..=MAX_STREAMS_CEILING).contains(&grant.limit) {
                return Err(("grant.limit", format!("use 1 to {MAX_STREAMS_CEILING}")));
            }
            if grant.duration_ms == 0 || grant.duration_ms > MAX_OVERRIDE_SEC * 1000 {
                return Err(("grant.duration_ms", "1 ms to 30 days".into()));
            }
        }
        note(&self.actor, &self.reason)
    }
}

impl Checked for AccountQuery {
    fn check(&self) -> Result<(), Refusal> {
        id("account_id", &self.account_id)?;
        if self.limit > MAX_ENTRIES {
            return Err(("limit", format!("at most {MAX_ENTRIES}")));
        }
        Ok(())
    }
}

impl Checked for AuditQuery {
    fn check(&self) -> Result<(), Refusal> {
        id("account_id", &self.account_id)?;
        if self.limit > MAX_ENTRIES {
            return Err(("limit", format!("at most {MAX_ENTRIES}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PlanTag;
    use crate::model::DeviceType;

    fn play() -> AcquireCmd {
        AcquireCmd {
            account_id: "acct-1".into(),
            device: Device {
                id: "tv".into(),
                kind: DeviceType::Tv,
                meta: "Living Room".into(),
                profile_id: String::new(),
                title_id: "t-1".into(),
            },
            nonce: [7; 16],
            plan: Some(Plan::new("standard", 2)),
            replace: None,
            shadow: false,
        }
    }

    #[test]
    fn a_play_travels_whole_and_is_taken() {
        let sent = play();
        let text = serde_json::to_string(&sent).unwrap();
        let got: AcquireCmd = serde_json::from_str(&text).unwrap();
        assert_eq!(format!("{got:?}"), format!("{sent:?}"));
        assert_eq!(got.check(), Ok(()));
    }

    #[test]
    fn each_field_from_a_peer_is_held_to_the_id_rules() {
        type Spoil = fn(&mut AcquireCmd);
        let cases: [(&str, Spoil); 6] = [
            ("account_id", |c| c.account_id = "a/../b".into()),
            ("device.id", |c| c.device.id = String::new()),
            ("device.meta", |c| c.device.meta = "\u{7}".into()),
            ("device.title_id", |c| c.device.title_id = "x".repeat(65)),
            ("plan", |c| c.plan = Some(Plan::new("standard", 0))),
            ("stream.plan", |c| {
                c.replace = Some(StreamRef {
                    device_id: "tv".into(),
                    nonce: [0; 16],
                    plan: PlanTag {
                        name: "..".into(),
                        limit: 2,
                    },
                })
            }),
        ];
        for (field, spoil) in cases {
            let mut cmd = play();
            spoil(&mut cmd);
            assert_eq!(cmd.check().map_err(|(f, _)| f), Err(field), "{cmd:?}");
        }
    }

    #[test]
    fn a_batch_is_bounded() {
        let renewal = AccountStream {
            account_id: "acct-1".into(),
            stream: StreamRef {
                device_id: "tv".into(),
                nonce: [1; 16],
                plan: PlanTag {
                    name: "basic".into(),
                    limit: 1,
                },
            },
            learning: false,
        };
        let batch = Heartbeats {
            renewals: vec![renewal; MAX_BATCH + 1],
        };
        assert_eq!(batch.check().map_err(|(f, _)| f), Err("renewals"));
    }
}
