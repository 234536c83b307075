//! Several regions: each account has one home region whose store alone decides its count
//! ([`home`]); the store the service calls ([`routed::RoutedStore`]) decides an account homed
//! here with this region's store and sends the operations of one homed elsewhere to its home
//! ([`map`], [`peer`]; roaming heartbeats batched per peer, [`heartbeats`]); what regions send
//! each other is [`wire`], taken by `api/regions.rs`; plays let through while a home does not
//! answer, and what becomes of them when it does, are [`provisional`].

mod heartbeats;
pub mod home;
pub mod map;
pub mod named;
pub mod peer;
pub mod provisional;
pub mod routed;
pub mod wire;
