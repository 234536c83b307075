//! Which slot a key hashes to, as Redis Cluster computes it (CRC16 of the key or its hash tag).

/// Slots in a Redis Cluster.
pub const SLOTS: usize = 16384;

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
pub(super) fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of a key, as Redis computes it: the hash tag (between the first `{` and the next
/// `}`) when it is not empty, else the whole key.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

/// The slot of every key tagged `{tag}` (an account id or a user name: the id rules allow no
/// braces, so the whole tag is the hash tag).
pub fn tag_slot(tag: &str) -> u16 {
    crc16(tag.as_bytes()) % SLOTS as u16
}
