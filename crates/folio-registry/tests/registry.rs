//! The registry over a real metadata store (the embedded one): registrations racing on one
//! subject each get their own version and none is lost; the same text raced gets one id
//! and one version; a breaking schema is refused under BACKWARD even when it races a
//! compatible one (the loser checks against the winner's schema).

use std::sync::Arc;

use folio_meta::MetadataStore;
use folio_meta::embedded::EmbeddedStore;
use folio_meta::keys::Keys;
use folio_registry::{Compatibility, Registry, RegistryError, Schema, SchemaType};

fn avro(fields: &str) -> Schema {
    let text = format!(r#"{{"type":"record","name":"R","fields":[{fields}]}}"#);
    Schema { ty: SchemaType::Avro, text }
}

fn registry() -> (tempfile::TempDir, Registry) {
    let dir = tempfile::tempdir().unwrap();
    let meta: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    (dir, Registry::new(meta, &Keys::new("t")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_registrations_each_get_a_version_and_none_is_lost() {
    let (_dir, r) = registry();
    r.set_compatibility(Some("s"), Compatibility::None).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            r.register("s", &avro(&format!(r#"{{"name":"f{i}","type":"long"}}"#))).await
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.unwrap().unwrap());
    }
    let mut versions: Vec<u32> = got.iter().map(|(_, v)| *v).collect();
    versions.sort_unstable();
    assert_eq!(versions, (1..=8).collect::<Vec<_>>(), "{got:?}");
    let mut ids: Vec<u64> = got.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 8, "eight texts, eight ids: {got:?}");
    assert_eq!(r.versions("s", false).await.unwrap(), (1..=8).collect::<Vec<_>>());
    // Each version holds the schema registered under it.
    for (id, v) in got {
        assert_eq!(r.version("s", Some(v), false).await.unwrap().id, id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_text_raced_is_one_id_and_one_version() {
    let (_dir, r) = registry();
    let s = avro(r#"{"name":"a","type":"int"}"#);
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (r, s) = (r.clone(), s.clone());
        tasks.push(tokio::spawn(async move { r.register("s", &s).await }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.unwrap().unwrap());
    }
    let (id, version) = got[0];
    assert!(got.iter().all(|g| *g == (id, 1)), "{got:?}");
    assert_eq!(version, 1);
    // Spacing does not make a new schema: the same id under another subject.
    let spaced = Schema { ty: SchemaType::Avro, text: s.text.replace(',', " , ") };
    assert_eq!(r.register("other", &spaced).await.unwrap(), (id, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaking_schema_racing_a_compatible_one_is_refused() {
    let (_dir, r) = registry();
    r.register("s", &avro(r#"{"name":"a","type":"int"}"#)).await.unwrap();
    // Compatible: a new field with a default. Breaking: a new field without one.
    let ok = avro(r#"{"name":"a","type":"int"},{"name":"b","type":"int","default":0}"#);
    let bad = avro(r#"{"name":"a","type":"int"},{"name":"c","type":"int"}"#);
    let (r1, r2) = (r.clone(), r.clone());
    let (a, b) = tokio::join!(r1.register("s", &ok), r2.register("s", &bad));
    assert_eq!(a.unwrap().1, 2);
    match b {
        Err(RegistryError::Incompatible { why, .. }) => {
            assert!(why.iter().any(|w| w.contains("c")), "{why:?}")
        }
        other => panic!("a breaking schema was {other:?}"),
    }
    assert_eq!(r.versions("s", false).await.unwrap(), vec![1, 2]);
    // Soft-deleted versions are skipped by compatibility and lookups, and come back with
    // `deleted`; a permanent delete needs the soft one first.
    assert!(matches!(
        r.delete_version("s", Some(2), true).await,
        Err(RegistryError::NotSoftDeleted { .. })
    ));
    assert_eq!(r.delete_version("s", Some(2), false).await.unwrap(), 2);
    assert_eq!(r.versions("s", false).await.unwrap(), vec![1]);
    assert_eq!(r.versions("s", true).await.unwrap(), vec![1, 2]);
}
