//! A persisted instance snapshot, as a store hands it back: bytes, read as JSON, then as a
//! snapshot (a format newer than this build refused). What reads must write back to the same
//! snapshot: the format is a compatibility contract (decision 0004). The same JSON also goes
//! through the NUL rule every stored value is held to (`storable`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sutra_core::snapshot::Snapshot;
use sutra_core::storable;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let pointers = storable::nul_pointers(&value);
    assert_eq!(storable::holds_nul(&value), !pointers.is_empty());
    for pointer in &pointers {
        assert!(
            value.pointer(pointer).is_some(),
            "{pointer:?} names no value"
        );
    }
    if let Ok(snapshot) = Snapshot::from_json(value) {
        let written = snapshot.to_json();
        assert_eq!(Snapshot::from_json(written).as_ref(), Ok(&snapshot));
        let _ = (snapshot.parks().count(), snapshot.status.is_terminal());
        for park in snapshot.parks() {
            let _ = park.kind.due();
        }
    }
});
