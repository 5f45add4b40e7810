//! A certificate's subject as Kafka names it (Java's `X500Principal.getName()`, RFC 2253:
//! the relative names last to first, `CN=client,OU=ops,O=Example`), read from the DER with
//! bounds checked at every step. The certificate has been verified by the TLS stack
//! already; anything this reader does not understand gives `None`, never a panic.

/// Reads one DER element at the start of `b`: its tag, contents and the rest after it.
fn element(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, &x| (acc << 8) | x as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The subject of a DER certificate in RFC 2253 form.
pub(crate) fn subject(cert: &[u8]) -> Option<String> {
    let (SEQUENCE, cert, _) = element(cert)? else { return None };
    let (SEQUENCE, mut tbs, _) = element(cert)? else { return None };
    // [0] version (optional), serial, signature algorithm, issuer, validity, subject.
    let (tag, _, rest) = element(tbs)?;
    if tag == 0xa0 {
        tbs = rest;
    }
    for _ in 0..4 {
        tbs = element(tbs)?.2;
    }
    let (SEQUENCE, mut name, _) = element(tbs)? else { return None };
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (SET, mut set, rest) = element(name)? else { return None };
        name = rest;
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (SEQUENCE, atv, rest) = element(set)? else { return None };
            set = rest;
            let (OID, oid, value) = element(atv)? else { return None };
            let (vtag, v, _) = element(value)?;
            parts.push(match (keyword(oid), text(vtag, v)) {
                (Some(k), Some(t)) => format!("{k}={}", escape(&t)),
                _ => format!("{}=#{}", dotted(oid)?, hex(value)),
            });
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

fn keyword(oid: &[u8]) -> Option<&'static str> {
    Some(match oid {
        [0x55, 0x04, 0x03] => "CN",
        [0x55, 0x04, 0x06] => "C",
        [0x55, 0x04, 0x07] => "L",
        [0x55, 0x04, 0x08] => "ST",
        [0x55, 0x04, 0x09] => "STREET",
        [0x55, 0x04, 0x0a] => "O",
        [0x55, 0x04, 0x0b] => "OU",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID",
        _ => return None,
    })
}

/// A directory string's text (UTF8String, PrintableString, IA5String, T61String).
fn text(tag: u8, v: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x13 | 0x16 | 0x14 => std::str::from_utf8(v).ok().map(str::to_string),
        _ => None,
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let last = s.chars().count().saturating_sub(1);
    for (i, c) in s.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn dotted(oid: &[u8]) -> Option<String> {
    let (&first, rest) = oid.split_first()?;
    let mut parts = vec![(first / 40) as u64, (first % 40) as u64];
    let mut acc: u64 = 0;
    for &b in rest {
        acc = acc.checked_mul(128)? | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            parts.push(acc);
            acc = 0;
        }
    }
    Some(parts.iter().map(u64::to_string).collect::<Vec<_>>().join("."))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_read_as_kafka_names_them_and_damage_gives_none() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Folio, Inc");
        params.distinguished_name.push(rcgen::DnType::CommonName, "client-1");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let der = cert.der().to_vec();
        assert_eq!(subject(&der).as_deref(), Some("CN=client-1,O=Folio\\, Inc"));
        for cut in 0..der.len() {
            let _ = subject(&der[..cut]); // never panics
        }
        let mut flipped = der.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0xff;
            let _ = subject(&flipped);
            flipped[i] ^= 0xff;
        }
        assert_eq!(
            dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]).as_deref(),
            Some("1.2.840.113549")
        );
    }
}
