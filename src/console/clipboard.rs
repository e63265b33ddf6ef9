//! Copying to the operator's clipboard through the terminal: an OSC 52 escape
//! (`ESC ] 52 ; c ; BASE64 ESC \`), which xterm, kitty, WezTerm, iTerm2, foot,
//! Alacritty and tmux (with `set-clipboard on`) understand, also over SSH. Pure: the
//! app writes the bytes to the terminal.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The escape sequence that puts `text` on the clipboard (selection `c`).
pub fn osc52(text: &str) -> Vec<u8> {
    let mut out = b"\x1b]52;c;".to_vec();
    out.extend_from_slice(base64(text.as_bytes()).as_bytes());
    out.extend_from_slice(b"\x1b\\");
    out
}

/// Standard base64 with padding (RFC 4648).
fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn the_escape_is_osc_52_on_the_clipboard_ended_by_st() {
        let token = "8263E5B9D2000000012B04";
        let bytes = osc52(token);
        assert_eq!(
            bytes,
            b"\x1b]52;c;ODI2M0U1QjlEMjAwMDAwMDAxMkIwNA==\x1b\\".to_vec()
        );
        // Whatever the text holds, the payload is base64: no byte of it can end the
        // sequence early or reach the terminal as a control.
        let hostile = osc52("a\x1b]0;title\x07\x1b\\b\n");
        let payload = &hostile[7..hostile.len() - 2];
        assert!(payload
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(b)));
    }
}
