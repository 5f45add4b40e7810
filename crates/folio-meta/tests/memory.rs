//! The conformance suite on the embedded store's memory engine (the simulator's): the same
//! store code on sorted maps, which a reopen finds as it left them.

mod suite;

use std::sync::Arc;
use std::time::Duration;

use folio_meta::embedded::{EmbeddedConfig, EmbeddedStore, MemoryEngine};
use folio_meta::*;
use suite::Backend;

struct Memory {
    engine: Arc<MemoryEngine>,
    clock: ManualClock,
    store: Option<Arc<EmbeddedStore>>,
}

impl Memory {
    fn open(engine: &Arc<MemoryEngine>, clock: &ManualClock) -> Arc<EmbeddedStore> {
        let config = EmbeddedConfig { lease_expiry_thread: false, ..EmbeddedConfig::default() };
        Arc::new(
            EmbeddedStore::open_memory(engine.clone(), config, Arc::new(clock.clone())).unwrap(),
        )
    }

    fn embedded(&self) -> &EmbeddedStore {
        self.store.as_ref().unwrap()
    }
}

async fn make(_name: &str) -> Memory {
    let (engine, clock) = (MemoryEngine::new(), ManualClock::new());
    let store = Some(Memory::open(&engine, &clock));
    Memory { engine, clock, store }
}

impl Backend for Memory {
    fn store(&self) -> Arc<dyn MetadataStore> {
        self.store.clone().unwrap()
    }
    fn root(&self) -> String {
        "test".into()
    }
    async fn expire(&self, ttl: Duration) {
        self.clock.advance(ttl + Duration::from_millis(1));
        self.embedded().expire_due().unwrap();
    }
    async fn reopen(&mut self) {
        drop(self.store.take());
        self.store = Some(Memory::open(&self.engine, &self.clock));
    }
    async fn compact(&self, revision: Revision) {
        self.embedded().compact(revision).unwrap();
    }
}

conformance_tests!(make);
