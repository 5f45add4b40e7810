//! Arbitrary bytes as a Kafka request frame through the broker's decoder (header, then the
//! body of the API it names): never a panic, never an allocation by an unchecked count.
//! The same function is fuzzed with seeded mutations of valid requests in
//! `crates/folio-broker/tests/protocol.rs`, which runs in CI on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = folio_broker::api::decode_request(bytes::Bytes::copy_from_slice(data));
});
