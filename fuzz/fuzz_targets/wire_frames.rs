//! Arbitrary bytes through the bookie frame splitter and both decoders: never a panic,
//! never an allocation above the frame limit, and every decoded frame re-encodes to a
//! frame that decodes to the same value.
#![no_main]

use bytes::BytesMut;
use folio_proto::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(body)) = wire::take_frame(&mut buf) {
        assert!(body.len() <= wire::FRAME_BYTES_MAX);
        if let Ok(req) = wire::decode_request(body.clone()) {
            let mut out = BytesMut::new();
            wire::encode_request(&req, &mut out);
            let again = wire::decode_request(wire::take_frame(&mut out).unwrap().unwrap()).unwrap();
            assert_eq!(again, req);
        }
        if let Ok(resp) = wire::decode_response(body) {
            let mut out = BytesMut::new();
            wire::encode_response(&resp, &mut out);
            let again = wire::decode_response(wire::take_frame(&mut out).unwrap().unwrap()).unwrap();
            assert_eq!(again, resp);
        }
    }
});
