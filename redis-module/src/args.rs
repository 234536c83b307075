//! The arguments of a command, checked by one set of rules: the same values the limiter passes
//! to the matching script, in the same order. Anything a script could not have stored in the
//! layout (a device name over 255 bytes, a limit over 255, a nonce not 16 bytes, details that
//! are not length-prefixed) is refused, so junk never reaches an account value.

use crate::error::Error;
pub use crate::keys::Arg;
use crate::layout::NONCE_LEN;

/// The arguments after the command name, with exactly `n` expected.
pub struct Args<'a>(&'a [Arg]);

/// The longest a time argument (a TTL, a duration) may be: about 3 years in ms; keeps every sum
/// of times inside 48 bits and far from overflow.
pub const MAX_MS: i64 = 100_000_000_000;

/// The most entries a list may be told to keep.
pub const MAX_COUNT: i64 = 1_000_000;

impl<'a> Args<'a> {
    pub fn new(all: &'a [Arg], n: usize) -> Result<Args<'a>, Error> {
        match all.len() == n + 1 {
            true => Ok(Args(&all[1..])),
            false => Err(Error::Arity),
        }
    }

    /// A command that takes a list: at least `n` arguments after its name.
    pub fn at_least(all: &'a [Arg], n: usize) -> Result<Args<'a>, Error> {
        match all.len() > n {
            true => Ok(Args(&all[1..])),
            false => Err(Error::Arity),
        }
    }

    /// How many arguments follow the command name.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn key(&self, i: usize) -> &'a Arg {
        &self.0[i]
    }

    pub fn bytes(&self, i: usize) -> &'a [u8] {
        self.0[i].as_slice()
    }

    /// A decimal integer in `min..=max`.
    fn int(&self, i: usize, name: &'static str, min: i64, max: i64) -> Result<i64, Error> {
        decimal(self.bytes(i))
            .filter(|n| (min..=max).contains(n))
            .ok_or(Error::Arg(name))
    }

    /// A positive time in ms.
    pub fn ms(&self, i: usize, name: &'static str) -> Result<i64, Error> {
        self.int(i, name, 1, MAX_MS)
    }

    /// A time in ms, 0 allowed (a duration that clears).
    pub fn ms_or_zero(&self, i: usize, name: &'static str) -> Result<i64, Error> {
        self.int(i, name, 0, MAX_MS)
    }

    /// A positive count (entries kept in a list).
    pub fn count(&self, i: usize, name: &'static str) -> Result<i64, Error> {
        self.int(i, name, 1, MAX_COUNT)
    }

    /// A count that the layout keeps in one byte (a limit).
    pub fn small(&self, i: usize, name: &'static str) -> Result<i64, Error> {
        self.int(i, name, 0, 255)
    }

    /// Text the layout keeps behind one length byte (a plan, a device).
    pub fn short(&self, i: usize, name: &'static str) -> Result<&'a [u8], Error> {
        let bytes = self.bytes(i);
        match bytes.len() <= 255 {
            true => Ok(bytes),
            false => Err(Error::Arg(name)),
        }
    }

    pub fn nonce(&self, i: usize, name: &'static str) -> Result<&'a [u8], Error> {
        let bytes = self.bytes(i);
        match bytes.len() == NONCE_LEN {
            true => Ok(bytes),
            false => Err(Error::Arg(name)),
        }
    }

    /// A nonce, or empty (no take-over).
    pub fn nonce_or_empty(&self, i: usize, name: &'static str) -> Result<&'a [u8], Error> {
        match self.bytes(i).is_empty() {
            true => Ok(&[]),
            false => self.nonce(i, name),
        }
    }

    /// A play's details: one length byte and exactly that many bytes (`encode_details`).
    pub fn details(&self, i: usize, name: &'static str) -> Result<&'a [u8], Error> {
        let bytes = self.bytes(i);
        match bytes.first() {
            Some(&len) if len as usize + 1 == bytes.len() => Ok(bytes),
            _ => Err(Error::Arg(name)),
        }
    }

    /// A plan's device caps: 6 bytes, or empty (none named).
    pub fn caps(&self, i: usize, name: &'static str) -> Result<&'a [u8], Error> {
        let bytes = self.bytes(i);
        match bytes.len() {
            0 | 6 => Ok(bytes),
            _ => Err(Error::Arg(name)),
        }
    }
}

/// A decimal integer as Rust's `i64` parsing reads it (an optional `+` or `-`, then digits and
/// nothing else), without its UTF-8 check and error values; `None` also past 2^62, far beyond
/// every argument's range.
pub fn decimal(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() || n > (1 << 62) / 10 {
            return None;
        }
        n = n * 10 + i64::from(b - b'0');
    }
    Some(if negative { -n } else { n })
}
