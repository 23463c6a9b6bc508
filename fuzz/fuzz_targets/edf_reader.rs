//! The EDF/BDF reader, through its in-memory API (`decode_bytes`): the first input byte
//! picks the lead (0: every signal, else the index byte − 1), the rest is the file.
//!
//! * Any bytes: no panic; a refusal names the header, a lead, the annotations or the file.
//! * A decoded recording has one column per chosen signal, its rows are the records'
//!   samples plus the gaps', every value is finite or NaN, and NaN only inside the gaps
//!   (the header's ranges keep every scaled value within float32).
#![no_main]

use libfuzzer_sys::fuzz_target;
use zerohop_ecg::edf::decode_bytes;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, file)) = data.split_first() else {
        return;
    };
    let leads = if pick == 0 {
        Vec::new()
    } else {
        vec![(pick - 1).to_string()]
    };
    match decode_bytes(file, &leads) {
        Err(e) => {
            let message = e.to_string();
            assert!(
                [
                    "EDF header",
                    "EDF lead",
                    "EDF+ annotations",
                    "EDF file",
                    "EDF+D file",
                    "recording"
                ]
                .iter()
                .any(|what| message.contains(what)),
                "{message}"
            );
        }
        Ok(r) => {
            assert_eq!(r.names.len(), r.signals.len());
            let per_record = r.header.signals[r.signals[0]].samples_per_record;
            let gaps: usize = r.gaps.iter().map(|g| g.samples).sum();
            assert_eq!(r.table.len(), r.records as usize * per_record + gaps);
            let mut in_gap = vec![false; r.table.len()];
            for g in &r.gaps {
                in_gap[g.sample..g.sample + g.samples].fill(true);
            }
            for name in &r.names {
                let column = r.table.column::<f32>(name).unwrap();
                for (v, &gap) in column.iter().zip(&in_gap) {
                    assert!(
                        if gap { v.is_nan() } else { v.is_finite() },
                        "{v} in {name}"
                    );
                }
            }
        }
    }
});
