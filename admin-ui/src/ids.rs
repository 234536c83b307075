//! Ids the dashboard takes from an address (a path segment or a query value), checked before any
//! of them reaches a limiter URL or a page. The rules are the limiter's own
//! (`screenlimit_limiter::ids`), called, never restated; the dashboard adds only what it needs to
//! put an id in an address at all (see [`crate::limiter::addressable`]).

use screenlimit_limiter::ids::{IdError, MAX_ID_LEN, has_stream_id_shape, validate_token};

use crate::limiter::addressable;

/// How much of a refused id a page repeats (it may be long or hostile; askama escapes it).
const SHOWN_CHARS: usize = 80;

/// What is wrong with a stream id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamIdProblem {
    #[error("it does not have the shape of one (the limiter's code, a dot, then the device id)")]
    Shape,
    #[error("its device part {0}")]
    Device(IdError),
}

/// An id from an address that the dashboard refuses, with what is wrong in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadId {
    #[error(
        "“{shown}” is not an account id: it {problem}. Account ids are 1 to {MAX_ID_LEN} \
         characters: letters A–Z and a–z, digits, and . _ : - (no spaces). Check the id the \
         customer read out, or copy it from the customer record."
    )]
    Account { shown: String, problem: IdError },
    #[error(
        "“{shown}” cannot be looked up: an id made only of dots would be read as a step up in \
         the address, not as an account. Check the id the customer read out."
    )]
    Unaddressable { shown: String },
    #[error(
        "“{shown}” is not a stream id: {problem}. Nothing was stopped. Open the account page \
         and use the device's Force stop button."
    )]
    Stream {
        shown: String,
        problem: StreamIdProblem,
    },
}

fn shown(id: &str) -> String {
    let mut shown: String = id.chars().take(SHOWN_CHARS).collect();
    if shown.len() < id.len() {
        shown.push('…');
    }
    shown
}

/// Checks an account id by the limiter's rules, and that it can stand in an address.
pub fn check_account_id(id: &str) -> Result<(), BadId> {
    validate_token(id).map_err(|problem| BadId::Account {
        shown: shown(id),
        problem,
    })?;
    if !addressable(id) {
        return Err(BadId::Unaddressable { shown: shown(id) });
    }
    Ok(())
}

/// Checks that `id` has the shape of a stream id the limiter issues, by the limiter's own rule
/// (`ids::has_stream_id_shape`). Whether it is this account's is the limiter's to say.
pub fn check_stream_id(id: &str) -> Result<(), BadId> {
    if has_stream_id_shape(id) {
        return Ok(());
    }
    // Say what is wrong as precisely as the parts allow: the device part, else the shape.
    let problem = match id.split_once('.').map(|(_, device)| validate_token(device)) {
        Some(Err(e)) => StreamIdProblem::Device(e),
        _ => StreamIdProblem::Shape,
    };
    Err(BadId::Stream {
        shown: shown(id),
        problem,
    })
}

#[cfg(test)]
mod tests {
    use screenlimit_limiter::ids::{PlanTag, STREAM_ID, StreamIdCodec, StreamRef};

    use super::*;

    #[test]
    fn account_ids_follow_the_limiter_rules() {
        assert!(check_account_id("acct-42").is_ok());
        for bad in ["", "acct 42", "a/b", "x?y", &"a".repeat(65), "é"] {
            let error = check_account_id(bad).unwrap_err().to_string();
            assert!(error.contains("is not an account id"), "{bad:?}: {error}");
        }
        for dots in [".", ".."] {
            assert!(check_account_id(dots).is_err(), "{dots:?}");
        }
    }

    #[test]
    fn every_stream_id_the_limiter_issues_passes() {
        let codec = StreamIdCodec::new(b"a secret for this test");
        for (plan, device) in [("basic", "tv"), (&*"p".repeat(64), &*"d".repeat(64))] {
            let stream = StreamRef {
                device_id: device.into(),
                nonce: [0xff; 16],
                plan: PlanTag {
                    name: plan.into(),
                    limit: 255,
                },
            };
            let id = codec.encode("acct-1", &stream);
            assert_eq!(check_stream_id(&id), Ok(()), "{id}");
        }
    }

    #[test]
    fn stream_ids_that_could_leave_their_segment_are_refused() {
        let long = format!("{}.tv", "A".repeat(STREAM_ID.max_chars));
        for bad in [
            "",
            ".",
            "..",
            "...",
            "a/b",
            "x?y",
            "x#y",
            "../../acct-8/streams/abc.tv",
            "abc",
            "abc.",
            "abc.a/b",
            "a b.tv",
            "ab%2F.tv",
            &long,
        ] {
            let error = check_stream_id(bad).unwrap_err().to_string();
            assert!(error.contains("is not a stream id"), "{bad:?}: {error}");
        }
        let error = check_stream_id(&long).unwrap_err().to_string();
        assert!(error.contains('…') && error.len() < 400, "{error}");
    }
}
