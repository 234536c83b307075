//! Several regions: which region is an account's home, the one whose store alone decides its
//! count ([`home`]).

pub mod home;
