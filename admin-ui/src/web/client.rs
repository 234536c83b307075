//! The client's address, for sign-in throttling and the audit log: the peer's, or behind a
//! trusted proxy (`--trusted-proxy`) the one that proxy names in `--client-address-header`.

use std::net::{IpAddr, SocketAddr};

use crate::connection::Connection;

use axum::extract::ConnectInfo;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use ipnet::IpNet;

use crate::config::Settings;

/// The address a request comes from. The header is believed only when the peer is a trusted
/// proxy; then the nearest address in it that is not itself a trusted proxy is the client.
pub fn client_address(settings: &Settings, peer: Option<IpAddr>, headers: &HeaderMap) -> IpAddr {
    let peer = peer.unwrap_or(IpAddr::from([0, 0, 0, 0]));
    if !trusted(&settings.trusted_proxies, peer) {
        return peer;
    }
    let hops: Vec<IpAddr> = headers
        .get_all(&settings.client_address_header)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|hop| parse_hop(hop.trim()))
        .collect();
    hops.iter()
        .rev()
        .find(|hop| !trusted(&settings.trusted_proxies, **hop))
        .or(hops.first())
        .copied()
        .unwrap_or(peer)
}

fn trusted(proxies: &[IpNet], address: IpAddr) -> bool {
    let address = canonical(address);
    proxies.iter().any(|net| net.contains(&address))
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they are.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// One hop of a forwarded-for list: an address, maybe with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(canonical)
}

/// The peer address of a request (served with connect info).
pub fn peer(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<Connection>>()
        .map(|info| canonical(info.0.peer.ip()))
}

/// A `--trusted-proxy` value: an address or a network (`10.0.0.0/8`).
pub fn parse_trusted_proxy(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{text}` is neither an address nor a network such as 10.0.0.0/8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::users::Users;

    fn settings(proxies: &[&str]) -> Settings {
        let mut settings = Settings::with_users(
            "http://127.0.0.1:1",
            Users::parse("a:viewer:$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA")
                .unwrap(),
        );
        settings.trusted_proxies = proxies
            .iter()
            .map(|p| parse_trusted_proxy(p).unwrap())
            .collect();
        settings
    }

    fn headers(forwarded: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", forwarded.parse().unwrap());
        headers
    }

    #[test]
    fn the_header_is_believed_only_from_a_trusted_proxy() {
        let peer: IpAddr = "10.1.2.3".parse().unwrap();
        let forged = headers("203.0.113.9");
        assert_eq!(client_address(&settings(&[]), Some(peer), &forged), peer);
        assert_eq!(
            client_address(&settings(&["10.0.0.0/8"]), Some(peer), &forged),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        // A client's own forged entries sit left of what the proxies appended.
        let chain = headers("1.1.1.1, 198.51.100.7, 10.0.0.2");
        assert_eq!(
            client_address(&settings(&["10.0.0.0/8"]), Some(peer), &chain),
            "198.51.100.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client_address(&settings(&["10.0.0.0/8"]), Some(peer), &HeaderMap::new()),
            peer
        );
        assert!(parse_trusted_proxy("not-an-ip").is_err());
        assert!(parse_trusted_proxy("::1").is_ok());
    }
}
