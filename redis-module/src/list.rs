//! `SL.LIST`: the account's plan, the limit in force, its override and its unexpired leases;
//! reads only (`list.lua`).
//!
//! SL.LIST key ttl default-plan default-limit
//! Answers {plan, limit in force, override limit, override end, plan limit, active raw records...}.

use redis_module::RedisValue;

use crate::account::{Account, Edit, Rec};
use crate::args::{Arg, Args};
use crate::error::Error;
use crate::keys::Keys;
use crate::layout::LIVE;
use crate::reply::{int, text};

pub fn list(keys: &Keys, all: &[Arg]) -> Result<RedisValue, Error> {
    let args = Args::new(all, 4)?;
    let (default_plan, default_limit) = (
        args.short(2, "default plan")?,
        args.small(3, "default limit")?,
    );
    let account = Account {
        keys,
        key: args.key(0),
        now: keys.now(),
        ttl: args.ms(1, "ttl")?,
        keep: 0, // nothing is written
    };
    let Some(scan) = account.scan()? else {
        return Ok(RedisValue::Array(vec![
            text(default_plan),
            int(default_limit),
            int(0),
            int(0),
            int(default_limit),
        ]));
    };
    let mut h = scan.h.clone();
    if h.ovr_ends <= account.now {
        (h.ovr_limit, h.ovr_ends) = (0, 0);
    }
    let mut out = vec![
        text(&h.plan),
        int(h.limit_at(account.now)),
        int(h.ovr_limit),
        int(h.ovr_ends),
        int(h.limit),
    ];
    push_active(&mut out, &account, &scan.v, &scan.recs, &[]);
    Ok(RedisValue::Array(out))
}

/// Appends the raw active records, each with its lease's current end, leaving out those with
/// an edit (`push_active`).
pub fn push_active(
    out: &mut Vec<RedisValue>,
    account: &Account,
    v: &[u8],
    recs: &[Rec],
    skip: &[Option<Edit>],
) {
    for (i, rec) in recs.iter().enumerate() {
        let skipped = skip.get(i).is_some_and(Option::is_some);
        if !skipped && rec.state == LIVE && rec.ends > account.now {
            let ends = account.lease_end(rec.at.nonce(v), rec.ends);
            out.push(RedisValue::StringBuffer(rec.at.restamp(v, LIVE, ends)));
        }
    }
}
