//! Status codes a bookie answers with. The numeric values are part of the wire protocol.

/// The outcome of one bookie request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    Ok = 0,
    /// The bookie has never had the ledger (and is not in limbo for it).
    NoLedger = 1,
    /// The ledger exists but the entry does not (and the ledger is not in limbo).
    NoEntry = 2,
    /// The request is malformed or its entry fails its digest; nothing was stored.
    BadRequest = 3,
    /// The bookie failed to read or write its disks.
    Io = 4,
    /// The master key does not match the ledger's.
    Unauthorized = 5,
    /// The ledger is fenced: only recovery adds are accepted.
    Fenced = 6,
    /// The bookie is read-only and takes no adds.
    ReadOnly = 7,
    /// The bookie is overloaded; retry later or elsewhere.
    TooManyRequests = 8,
    /// The bookie may have lost data for this ledger (limbo) and cannot say "no".
    Unknown = 9,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 10] = [
        Status::Ok,
        Status::NoLedger,
        Status::NoEntry,
        Status::BadRequest,
        Status::Io,
        Status::Unauthorized,
        Status::Fenced,
        Status::ReadOnly,
        Status::TooManyRequests,
        Status::Unknown,
    ];

    /// The status with wire code `code`, if there is one.
    pub fn from_u8(code: u8) -> Option<Status> {
        Status::ALL.iter().copied().find(|s| *s as u8 == code)
    }

    /// The status's name, for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::NoLedger => "NO_LEDGER",
            Status::NoEntry => "NO_ENTRY",
            Status::BadRequest => "BAD_REQUEST",
            Status::Io => "IO",
            Status::Unauthorized => "UNAUTHORIZED",
            Status::Fenced => "FENCED",
            Status::ReadOnly => "READ_ONLY",
            Status::TooManyRequests => "TOO_MANY_REQUESTS",
            Status::Unknown => "UNKNOWN",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_rejected() {
        for s in Status::ALL {
            assert_eq!(Status::from_u8(s as u8), Some(s));
        }
        assert_eq!(Status::from_u8(Status::ALL.len() as u8), None);
        assert_eq!(Status::from_u8(255), None);
    }
}
