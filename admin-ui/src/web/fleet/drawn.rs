//! The decision kinds the fleet charts draw, with their CSS classes: the same for the last
//! 10 minutes (`recent.rs`) and for Prometheus's longer ranges (`long_range.rs`).

/// The decision kinds drawn, with their CSS classes (the table lists every kind).
pub const DRAWN: [(&str, &str); 4] = [
    ("allowed", "allowed"),
    ("denied", "denied"),
    ("degraded", "degraded"),
    ("renewed", "renewed"),
];
