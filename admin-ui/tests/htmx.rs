//! The htmx the dashboard serves is the pinned release, byte for byte, and the pages use it.

mod common;

use common::{Agent, VIEWER, stack};
use screenlimit_admin_ui::web::assets::{HTMX_JS, HTMX_PATH, HTMX_SHA256, HTMX_VERSION};
use sha2::{Digest, Sha256};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_embedded_file_is_the_pinned_release() {
    assert_eq!(
        hex(&Sha256::digest(HTMX_JS)),
        HTMX_SHA256,
        "static/htmx-*.min.js changed"
    );
    let marker = format!("version:\"{HTMX_VERSION}\"");
    assert!(std::str::from_utf8(HTMX_JS).unwrap().contains(&marker));
    assert!(
        HTMX_VERSION.starts_with("2."),
        "htmx 2.x on purpose (see README)"
    );
    assert!(HTMX_PATH.contains(HTMX_VERSION));
}

#[tokio::test]
async fn pages_load_the_served_pinned_file() {
    let stack = stack().await;
    let mut agent = Agent::signed_in(&stack.url, VIEWER).await;
    let page = agent.get("/accounts").await;
    assert!(
        page.body
            .contains(&format!(r#"<script src="{HTMX_PATH}" defer></script>"#))
    );
    assert!(
        !page.body.contains("unpkg") && !page.body.contains("cdn"),
        "never a CDN"
    );
    let response = common::http()
        .get(format!("{}{HTMX_PATH}", stack.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert!(
        response.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    let body = response.bytes().await.unwrap();
    assert_eq!(hex(&Sha256::digest(&body)), HTMX_SHA256);
}
