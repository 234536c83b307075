//! Ids the dashboard takes from an address (a path segment or a query value), checked before any
//! of them reaches a limiter URL or a page. The rules are the limiter's own
//! (`screenlimit_limiter::ids`), called, never restated; the dashboard adds only what it needs to
//! put an id in an address at all (see [`crate::limiter::addressable`]).

use screenlimit_limiter::ids::{IdError, MAX_ID_LEN, validate_token};

use crate::limiter::addressable;

/// How much of a refused id a page repeats (it may be long or hostile; askama escapes it).
const SHOWN_CHARS: usize = 80;

/// Longest stream id the dashboard passes on. The limiter's are `<code>.<device id>`: the code
/// is base64url of a 16-byte nonce, a byte and a plan id (at most `MAX_ID_LEN`) plus a 16-character
/// tag, under 130 characters; the device id at most `MAX_ID_LEN`. Anything longer is not one.
pub const MAX_STREAM_ID_LEN: usize = 4 * MAX_ID_LEN;

/// What is wrong with a stream id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamIdProblem {
    #[error("it does not have the shape of one (the limiter's code, a dot, then the device id)")]
    Shape,
    #[error("it {0}")]
    Whole(IdError),
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

/// Checks that `id` has the shape of a stream id the limiter issues (`ids::StreamIdCodec`):
/// `<code>.<device id>`, the device id by the limiter's id rule, the code of the same alphabet
/// (base64url lies inside it). Whether it is this account's is the limiter's to say.
pub fn check_stream_id(id: &str) -> Result<(), BadId> {
    stream_id_problem(id).map_or(Ok(()), |problem| {
        Err(BadId::Stream {
            shown: shown(id),
            problem,
        })
    })
}

fn stream_id_problem(id: &str) -> Option<StreamIdProblem> {
    if id.len() > MAX_STREAM_ID_LEN {
        return Some(StreamIdProblem::Whole(IdError::TooLong {
            max: MAX_STREAM_ID_LEN,
        }));
    }
    let Some((code, device)) = id.split_once('.') else {
        return Some(StreamIdProblem::Shape);
    };
    if code.is_empty() {
        return Some(StreamIdProblem::Shape);
    }
    if let Err(e) = validate_token(device) {
        return Some(StreamIdProblem::Device(e));
    }
    // The code may be longer than one id: the id rule applies to each piece of it.
    let pieces = code.as_bytes().chunks(MAX_ID_LEN);
    pieces
        .map(|piece| std::str::from_utf8(piece).map_err(|_| IdError::BadCharacter))
        .find_map(|piece| piece.and_then(validate_token).err())
        .map(StreamIdProblem::Whole)
}

#[cfg(test)]
mod tests {
    use screenlimit_limiter::ids::{PlanTag, StreamIdCodec, StreamRef};

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
        let long = format!("{}.tv", "A".repeat(MAX_STREAM_ID_LEN));
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
