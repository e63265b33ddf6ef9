//! Redaction by structure: a connection string is read as scheme, user-info, hosts,
//! path and options, and only the secret parts are replaced by `***`: the user-info
//! password and the values of the options in [`SECRET_OPTIONS`]. Text is never
//! searched for a secret's value, so words that happen to equal a password stay.

use std::borrow::Cow;

/// A connection string as the program holds it: whole for the driver
/// ([`ConnectionString::expose`]), redacted wherever it is formatted (`Debug`), so a
/// struct that holds one can derive `Debug` without printing a secret.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct ConnectionString(String);

impl ConnectionString {
    pub fn new(uri: impl Into<String>) -> Self {
        Self(uri.into())
    }

    /// The whole string, secrets included: for the driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// With its secrets masked, for people.
    pub fn redacted(&self) -> String {
        redact_uri(&self.0)
    }
}

impl std::fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.redacted(), f)
    }
}

impl std::str::FromStr for ConnectionString {
    type Err = std::convert::Infallible;

    fn from_str(uri: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(uri))
    }
}

impl From<String> for ConnectionString {
    fn from(uri: String) -> Self {
        Self(uri)
    }
}

impl From<&str> for ConnectionString {
    fn from(uri: &str) -> Self {
        Self::new(uri)
    }
}

/// What a secret is replaced by.
const MASK: &str = "***";

/// Connection-string options whose values are secrets, compared without regard to case
/// (option names are case-insensitive). From the MongoDB URI options specification
/// (mongodb/specifications, source/uri-options): `tlsCertificateKeyFilePassword`
/// (decrypts the client key), `proxyPassword` (the SOCKS5 proxy's password) and
/// `authMechanismProperties` (`KEY:value` pairs such as `AWS_SESSION_TOKEN:…`; every
/// value is masked, whatever its key). `sslClientCertificateKeyPassword` is the older
/// name of tlsCertificateKeyFilePassword that some drivers (C, Go) still accept.
/// (`sslPEMKeyPassword` is a `mongod`/`mongo` command-line flag, not a URI option.)
const SECRET_OPTIONS: &[&str] = &[
    "tlsCertificateKeyFilePassword",
    "sslClientCertificateKeyPassword",
    "proxyPassword",
    AUTH_MECHANISM_PROPERTIES,
];

const AUTH_MECHANISM_PROPERTIES: &str = "authMechanismProperties";

/// The schemes that start a connection string inside a message.
const SCHEMES: &[&str] = &["mongodb://", "mongodb+srv://"];

/// `uri` with its password and the values of secret options replaced by `***`; every
/// other byte is kept. Safe to print and log. Strings that are not URIs are read the
/// same way (`user:secret@host` → `user:***@host`).
pub fn redact_uri(uri: &str) -> String {
    redact(uri).text
}

/// Whether a secret in `uri` is malformed so that the driver would read part of it
/// as something else and may name that part in its error: a password with an
/// unencoded `?`, an unencoded `&` in a secret option, or an
/// `authMechanismProperties` entry that is not `KEY:value`.
pub(crate) fn secret_is_malformed(uri: &str) -> bool {
    redact(uri).malformed
}

/// A redacted URI, and whether a secret in it was malformed (see
/// [`secret_is_malformed`]).
struct Redacted {
    text: String,
    malformed: bool,
}

fn redact(uri: &str) -> Redacted {
    let body = scheme_end(uri);
    let rest = &uri[body..];
    let user_info = user_info(rest);
    let mut out = Redacted {
        text: String::with_capacity(uri.len()),
        malformed: user_info.as_ref().is_some_and(|u| u.misread),
    };
    out.text.push_str(&uri[..body]);
    let after_user_info = match user_info {
        Some(UserInfo { password, end, .. }) => {
            match password {
                Some(from) => {
                    out.text.push_str(&rest[..from]);
                    out.text.push_str(MASK);
                }
                None => out.text.push_str(&rest[..end]),
            }
            end
        }
        None => 0,
    };
    match rest[after_user_info..].find('?') {
        Some(q) => {
            let query = after_user_info + q + 1;
            out.text.push_str(&rest[after_user_info..query]);
            redact_options(&rest[query..], &mut out);
        }
        None => out.text.push_str(&rest[after_user_info..]),
    }
    out
}

/// Where the text after `scheme://` starts, or 0 when `uri` does not start with a
/// scheme (a `://` further on, as in `appName=http://x`, is no scheme).
fn scheme_end(uri: &str) -> usize {
    match uri.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            scheme.len() + 3
        }
        _ => 0,
    }
}

/// `text` with every connection string in it (from `mongodb://` or `mongodb+srv://`,
/// in any case, up to whitespace or a quote) redacted by [`redact_uri`]; all other
/// text is kept as it is.
pub fn redact_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while let Some(start) = next_uri(text, at) {
        let end = text[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
            .map_or(text.len(), |n| start + n);
        out.push_str(&text[copied..start]);
        out.push_str(&redact_uri(&text[start..end]));
        copied = end;
        at = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Where the next connection string in `text` starts, at or after byte `from`.
fn next_uri(text: &str, from: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    (from..bytes.len()).find(|&i| {
        SCHEMES.iter().any(|scheme| {
            bytes[i..]
                .get(..scheme.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(scheme.as_bytes()))
        })
    })
}

/// The user-info of a URI's text after the scheme: `end` is the `@` that ends it,
/// `password` where the password starts (after the first `:`), if there is one;
/// `misread` when the driver reads it otherwise (a password with an unencoded `?`).
struct UserInfo {
    password: Option<usize>,
    end: usize,
    misread: bool,
}

/// Reads the user-info as the driver does: up to the last `@` before the first `?`.
/// When there is no `@` before the `?` but there is one after it, either an option
/// value holds an `@` (`appName=me@home`) or the password holds an unencoded `?`
/// (`app:pa?ss@db1`): it is the first when what precedes the `?` is a well-formed
/// host list, else the user-info is taken to end at the last `@` followed by
/// something shaped like hosts, which can only hide too much.
fn user_info(rest: &str) -> Option<UserInfo> {
    let hosts_end = rest.find('?').unwrap_or(rest.len());
    if let Some(at) = rest[..hosts_end].rfind('@') {
        return Some(UserInfo {
            password: rest[..at].find(':').map(|colon| colon + 1),
            end: at,
            misread: false,
        });
    }
    if !rest[hosts_end..].contains('@') || is_host_list(&rest[..hosts_end]) {
        return None;
    }
    let at = last_at_before_hosts(rest)?;
    let colon = rest[..at].find(':')?;
    Some(UserInfo {
        password: Some(colon + 1),
        end: at,
        misread: true,
    })
}

/// The last `@` followed by a non-empty run of host characters up to `/`, `?` or the
/// end, or else the last `@`. One pass from the end, so long inputs stay linear.
fn last_at_before_hosts(text: &str) -> Option<usize> {
    let mut run_is_hosts = true;
    let mut run_is_empty = true;
    for (i, c) in text.char_indices().rev() {
        match c {
            '/' | '?' => {
                run_is_hosts = true;
                run_is_empty = true;
            }
            '@' if run_is_hosts && !run_is_empty => return Some(i),
            c => {
                run_is_hosts &= is_host_char(c);
                run_is_empty = false;
            }
        }
    }
    text.rfind('@')
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || ".-_:,[]%".contains(c)
}

/// Whether `text` (up to its first `/`) is a list of `host[:port]` with numeric ports,
/// IPv6 literals in brackets allowed.
fn is_host_list(text: &str) -> bool {
    let hosts = text.split('/').next().unwrap_or_default();
    let numeric_port = |port: &str| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    hosts.split(',').all(|host| {
        let (name, port) = match host.strip_prefix('[') {
            Some(literal) => match literal.split_once(']') {
                Some((address, "")) => (address, None),
                Some((address, tail)) => match tail.strip_prefix(':') {
                    Some(port) => (address, Some(port)),
                    None => return false,
                },
                None => return false,
            },
            None => match host.split_once(':') {
                Some((name, port)) => (name, Some(port)),
                None => (host, None),
            },
        };
        !name.is_empty() && name.chars().all(is_host_char) && port.is_none_or(numeric_port)
    })
}

/// Appends `options` (the text after `?`) with secret values masked. Options are
/// separated by `&` or `;`. Pieces without `=` right after a secret option are taken
/// as the rest of its value (an unencoded `&` in the secret) and masked with it.
fn redact_options(options: &str, out: &mut Redacted) {
    let mut in_secret = false;
    let mut masked = false;
    let mut start = 0;
    loop {
        let end = options[start..]
            .find(['&', ';'])
            .map_or(options.len(), |n| start + n);
        let piece = &options[start..end];
        let separator = &options[start.saturating_sub(1)..start];
        match piece.split_once('=') {
            None if in_secret => {
                if !piece.is_empty() {
                    out.malformed = true;
                    if !masked {
                        out.text.push_str(MASK);
                        masked = true;
                    }
                }
            }
            Some((name, value)) if is_secret_option(name) => {
                out.text.push_str(separator);
                out.text.push_str(name);
                out.text.push('=');
                in_secret = true;
                masked = !value.is_empty();
                if is_option(name, AUTH_MECHANISM_PROPERTIES) {
                    redact_properties(value, out);
                } else if masked {
                    out.text.push_str(MASK);
                }
            }
            _ => {
                out.text.push_str(separator);
                out.text.push_str(piece);
                in_secret = false;
            }
        }
        if end == options.len() {
            break;
        }
        start = end + 1;
    }
}

/// `KEY:value,KEY:value` with every value masked. The separator may be percent-encoded
/// (`%3A`); an entry without one is all value.
fn redact_properties(value: &str, out: &mut Redacted) {
    for (index, entry) in value.split(',').enumerate() {
        if index > 0 {
            out.text.push(',');
        }
        let key_end = entry
            .find(':')
            .map(|colon| colon + 1)
            .into_iter()
            .chain(find_ignore_case(entry, "%3a").map(|at| at + 3))
            .min();
        match key_end {
            Some(key_end) => out.text.push_str(&entry[..key_end]),
            None if entry.is_empty() => continue,
            None => out.malformed = true,
        }
        out.text.push_str(MASK);
    }
}

fn find_ignore_case(text: &str, needle: &str) -> Option<usize> {
    text.as_bytes()
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

fn is_secret_option(name: &str) -> bool {
    SECRET_OPTIONS.iter().any(|secret| is_option(name, secret))
}

/// Whether the option `name` as written (perhaps percent-encoded) is `option`.
fn is_option(name: &str, option: &str) -> bool {
    percent_decode(name).eq_ignore_ascii_case(option)
}

fn percent_decode(text: &str) -> Cow<'_, str> {
    if !text.contains('%') {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_plain_passwords() {
        assert_eq!(
            redact_uri("mongodb://app:s3cret@db1:27017,db2/admin?replicaSet=rs0"),
            "mongodb://app:***@db1:27017,db2/admin?replicaSet=rs0"
        );
        assert_eq!(
            redact_uri("mongodb+srv://app:p%40ss@cluster0.example.net/"),
            "mongodb+srv://app:***@cluster0.example.net/"
        );
    }

    #[test]
    fn leaves_uris_without_password_alone() {
        for uri in [
            "mongodb://localhost:27017",
            "mongodb://user@host/",
            "mongodb://host/?authMechanism=MONGODB-X509",
            "",
            "not a uri",
        ] {
            assert_eq!(redact_uri(uri), uri);
        }
    }

    #[test]
    fn at_signs_inside_the_password_are_hidden_too() {
        let redacted = redact_uri("mongodb://app:p@ss@w0rd@db1:27017/?w=majority");
        assert_eq!(redacted, "mongodb://app:***@db1:27017/?w=majority");
        assert_eq!(
            redact_uri("mongodb://app:a/b@c@db1/"),
            "mongodb://app:***@db1/"
        );
    }

    #[test]
    fn at_signs_in_options_never_reveal_the_password() {
        let redacted = redact_uri("mongodb://app:topsecret@db1/?appName=me@home");
        assert!(!redacted.contains("topsecret"), "{redacted}");
    }

    #[test]
    fn unparsable_strings_are_redacted_conservatively() {
        assert_eq!(redact_uri("app:hunter2@db"), "app:***@db");
        assert!(!redact_uri("mongodb://:hunter2@").contains("hunter2"));
        assert!(!redact_uri("mongodb://u:hunter2@@@").contains("hunter2"));
        assert!(!redact_uri("u:hunter2@/").contains("hunter2"));
        // A `://` inside an option value is no scheme.
        assert_eq!(
            redact_uri("app:hunter2@db/?appName=http://x"),
            "app:***@db/?appName=http://x"
        );
    }

    #[test]
    fn a_question_mark_in_an_unencoded_password_hides_it_whole() {
        // The driver would read `app:pa` as a host; the user meant a password `pa?ss`.
        for uri in [
            "mongodb://app:pa?ss@db1/",
            "mongodb://app:pa?ss@db1:27017/?replicaSet=rs0",
            "mongodb://app:pa?ss=1@db1/",
        ] {
            let redacted = redact_uri(uri);
            assert!(redacted.starts_with("mongodb://app:***@db1"), "{redacted}");
        }
    }

    #[test]
    fn each_secret_option_is_masked() {
        for name in [
            "tlsCertificateKeyFilePassword",
            "sslClientCertificateKeyPassword",
            "proxyPassword",
        ] {
            let uri = format!("mongodb://db1/?tls=true&{name}=hunter2&replicaSet=rs0");
            assert_eq!(
                redact_uri(&uri),
                format!("mongodb://db1/?tls=true&{name}={MASK}&replicaSet=rs0")
            );
        }
    }

    #[test]
    fn every_auth_mechanism_property_value_is_masked() {
        assert_eq!(
            redact_uri(
                "mongodb://db1/?authMechanism=MONGODB-AWS\
                 &authMechanismProperties=AWS_SESSION_TOKEN:FQoGZXIvYXdzE,SERVICE_NAME:other"
            ),
            "mongodb://db1/?authMechanism=MONGODB-AWS\
             &authMechanismProperties=AWS_SESSION_TOKEN:***,SERVICE_NAME:***"
        );
        // An entry without a key is all value.
        assert_eq!(
            redact_uri("mongodb://db1/?authMechanismProperties=FQoGZXIvYXdzE"),
            "mongodb://db1/?authMechanismProperties=***"
        );
    }

    #[test]
    fn option_names_are_case_insensitive() {
        assert_eq!(
            redact_uri(
                "mongodb://u:pw@db1/?PROXYPASSWORD=a&TlsCertificateKeyFilePassword=b\
                 &authmechanismproperties=AWS_SESSION_TOKEN:c"
            ),
            "mongodb://u:***@db1/?PROXYPASSWORD=***&TlsCertificateKeyFilePassword=***\
             &authmechanismproperties=AWS_SESSION_TOKEN:***"
        );
    }

    #[test]
    fn percent_encoded_values_and_names_are_masked() {
        assert_eq!(
            redact_uri("mongodb://db1/?proxyPassword=p%26ss%3Dw0rd&w=1"),
            "mongodb://db1/?proxyPassword=***&w=1"
        );
        // `%3A` is an encoded ':' and `%2C` an encoded ',': everything after the first
        // separator is value.
        let redacted =
            redact_uri("mongodb://db1/?authMechanismProperties=AWS_SESSION_TOKEN%3Atok%2CX%3Ay");
        assert_eq!(
            redacted,
            "mongodb://db1/?authMechanismProperties=AWS_SESSION_TOKEN%3A***"
        );
        assert_eq!(
            redact_uri("mongodb://db1/?proxy%50assword=hunter2"),
            "mongodb://db1/?proxy%50assword=***"
        );
    }

    #[test]
    fn options_that_are_not_secrets_are_untouched() {
        // The password is a word that also appears in other options: only the
        // user-info and the secret options change.
        assert_eq!(
            redact_uri(
                "mongodb://orders:orders@db1,db2/orders?replicaSet=orders&authSource=admin\
                 &tls=true&appName=orders-service&proxyPassword=orders&readPreferenceTags=dc:ny"
            ),
            "mongodb://orders:***@db1,db2/orders?replicaSet=orders&authSource=admin\
             &tls=true&appName=orders-service&proxyPassword=***&readPreferenceTags=dc:ny"
        );
    }

    #[test]
    fn at_signs_in_option_values_of_a_uri_without_credentials_change_nothing() {
        for uri in [
            "mongodb://db1:27017/?appName=me@home",
            "mongodb://[::1]:27017,db2/?appName=a:b@c&w=1",
        ] {
            assert_eq!(redact_uri(uri), uri);
        }
    }

    #[test]
    fn a_secret_cut_by_a_raw_ampersand_is_masked_whole() {
        // `&cd` is no option: the user's password was `ab&cd`.
        assert_eq!(
            redact_uri("mongodb://db1/?proxyPassword=ab&cd&replicaSet=rs0"),
            "mongodb://db1/?proxyPassword=***&replicaSet=rs0"
        );
    }

    #[test]
    fn secrets_the_driver_would_misread_are_called_malformed() {
        for uri in [
            "mongodb://app:pa?ss@db1/",
            "mongodb://db1/?proxyPassword=ab&cd",
            "mongodb://db1/?authMechanismProperties=TOKEN",
            "mongodb://db1/?authMechanismProperties=SERVICE_NAME:x,TOKEN",
        ] {
            assert!(secret_is_malformed(uri), "{uri}");
        }
        for uri in [
            "mongodb://app:p%3Fss@db1/?proxyPassword=a%26b&w=1",
            "mongodb://db1:27017/?appName=me@home",
            "mongodb://db1/?authMechanismProperties=SERVICE_NAME:x,CANONICALIZE_HOST_NAME%3Atrue",
            "mongodb://db1/?proxyPassword=&w=1",
            "",
        ] {
            assert!(!secret_is_malformed(uri), "{uri}");
        }
    }

    #[test]
    fn odd_input_does_not_panic() {
        for odd in [
            "",
            "mongodb://",
            "mongodb+srv://",
            "mongodb://?",
            "mongodb://@",
            "mongodb://:@",
            "mongodb://h/?",
            "mongodb://h/?proxyPassword",
            "mongodb://h/?&&;=&==&proxyPassword=",
            "mongodb://h/?authMechanismProperties=",
            "mongodb://h/?authMechanismProperties=,:,%3",
            "mongodb://h/?proxyPassword=%",
            "?",
            "@?@",
            "://",
            "mongodb://ü:é@høst/?appName=日本",
        ] {
            let _ = redact_uri(odd);
            let _ = redact_message(odd);
        }
        assert_eq!(
            redact_uri("mongodb://h/?proxyPassword"),
            "mongodb://h/?proxyPassword"
        );
        assert_eq!(
            redact_uri("mongodb://h/?proxyPassword=%"),
            "mongodb://h/?proxyPassword=***"
        );
        assert_eq!(
            redact_uri("mongodb://h/?authMechanismProperties=,:,%3"),
            "mongodb://h/?authMechanismProperties=,:***,***"
        );
    }

    #[test]
    fn non_ascii_secrets_are_masked() {
        assert_eq!(
            redact_uri("mongodb://ü:pässwörd@høst/?proxyPassword=sécrèt&appName=日本"),
            "mongodb://ü:***@høst/?proxyPassword=***&appName=日本"
        );
    }

    #[test]
    fn a_100_000_character_uri_is_redacted() {
        let filler = "a@b&".repeat(25_000);
        let uri = format!("mongodb://u:SECRET1@h/?appName={filler}&proxyPassword=SECRET2");
        assert!(uri.len() > 100_000);
        let redacted = redact_uri(&uri);
        assert!(!redacted.contains("SECRET"), "secret left in the long URI");
        assert!(redacted.len() > 100_000);
        let message = format!("cannot connect to {uri} (timed out)");
        let redacted = redact_message(&message);
        assert!(
            !redacted.contains("SECRET"),
            "secret left in the long message"
        );
        assert!(redacted.ends_with("proxyPassword=*** (timed out)"));
    }

    #[test]
    fn uris_inside_messages_are_masked_and_nothing_else() {
        // The password is "failed": the word elsewhere in the message stays.
        let message = "authentication failed for mongodb://app:failed@db1/?proxyPassword=x \
                       (failed twice), see 'mongodb+srv://u:pw@c.example.net/?tls=true'";
        assert_eq!(
            redact_message(message),
            "authentication failed for mongodb://app:***@db1/?proxyPassword=*** \
             (failed twice), see 'mongodb+srv://u:***@c.example.net/?tls=true'"
        );
    }

    #[test]
    fn messages_without_uris_are_unchanged() {
        for message in [
            "Authentication failed.",
            "password failed for user app:failed@db1",
            "proxyPassword=x is an option",
            "mongodb is unreachable",
        ] {
            assert_eq!(redact_message(message), message);
        }
    }

    #[test]
    fn a_uri_in_a_message_ends_at_whitespace_or_a_quote() {
        assert_eq!(
            redact_message("\"mongodb://u:p@h\"x and `MONGODB://u:q@h`\tmongodb://u:r@h\nend"),
            "\"mongodb://u:***@h\"x and `MONGODB://u:***@h`\tmongodb://u:***@h\nend"
        );
    }
}
