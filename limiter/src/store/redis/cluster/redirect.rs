//! What a cluster node's error reply asks of the client: `MOVED`, `ASK` or `TRYAGAIN`.

/// What a node's error reply asks of the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Redirect {
    /// The slot has a new owner: for good.
    Moved { slot: u16, address: String },
    /// This one command goes to `address`, after `ASKING` (a slot being migrated).
    Ask { address: String },
    /// Try again shortly (a slot in mid-migration).
    TryAgain,
}

impl Redirect {
    /// Reads `MOVED 3999 127.0.0.1:6381`, `ASK 3999 127.0.0.1:6381` and `TRYAGAIN ...`.
    pub fn parse(error: &redis::ServerError) -> Option<Redirect> {
        let detail = error.details().unwrap_or_default();
        let mut words = detail.split_whitespace();
        match error.code() {
            "TRYAGAIN" => Some(Redirect::TryAgain),
            code @ ("MOVED" | "ASK") => {
                let slot = words.next()?.parse().ok()?;
                let address = words.next()?.to_owned();
                Some(match code {
                    "MOVED" => Redirect::Moved { slot, address },
                    _ => Redirect::Ask { address },
                })
            }
            _ => None,
        }
    }
}
