use super::limits_form::parse_override;
use super::page::malformed;
use super::reason::clean_reason;

#[test]
fn reasons_are_normalized_and_bounded() {
    assert_eq!(
        clean_reason("  customer asked\r\nticket 7 "),
        Ok("customer asked\nticket 7".into())
    );
    assert!(clean_reason(&"x".repeat(201)).is_err());
    assert!(clean_reason("bell\u{7}").is_err());
    assert!(malformed("acct-42").is_none());
    assert!(malformed("acct 42").is_some());
    assert!(malformed(&"a".repeat(65)).is_some());
}

#[test]
fn override_input_is_checked_in_words() {
    assert_eq!(parse_override(" 3 ", "86400"), Ok((3, 86400)));
    assert_eq!(parse_override("100", "2592000"), Ok((100, 2_592_000)));
    assert!(
        parse_override("", "3600")
            .unwrap_err()
            .contains("Enter how many")
    );
    for bad in ["0", "101", "-1", "2.5", "three"] {
        let message = parse_override(bad, "3600").unwrap_err();
        assert!(message.contains("1 to 100"), "{bad}: {message}");
    }
    for bad in ["", "0", "2592001", "1h"] {
        assert!(parse_override("3", bad).is_err(), "{bad}");
    }
}
