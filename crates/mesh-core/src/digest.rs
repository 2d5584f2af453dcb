//! How a SHA-256 digest is written in mesh: 64 lowercase hex digits.
//!
//! A leaf module: an artifact reference, a manifest's digest-pinned image and
//! an object's name all check digests, and each can depend on this without
//! depending on the others (`artifact` uses `manifest`, so `manifest` must
//! not reach back into `artifact` for this).

/// Whether `s` is a SHA-256 digest as written here: 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn only_64_lowercase_hex_digits_are_a_digest() {
        assert!(is_sha256_hex(HEX));
        assert!(!is_sha256_hex(&HEX[1..]));
        assert!(!is_sha256_hex(&format!("{HEX}0")));
        assert!(!is_sha256_hex(&HEX.replace('0', "g")));
        assert!(!is_sha256_hex(&HEX.to_uppercase()));
        assert!(!is_sha256_hex(""));
    }
}
