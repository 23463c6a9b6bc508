//! The core's messages name a way out in the Python package's spelling where a C caller can
//! reach them; this face says what a C caller passes instead. Whole phrases, not the bare
//! `copy=True`, so a column name that happens to contain it is left alone; tests/wording.rs
//! triggers each phrase, so a rewording in the core fails there rather than leaking through.

/// (the core's phrase, what C says).
const IN_C_TERMS: &[(&str, &str)] = &[
    // A map group strides cannot describe (`zh_table_map`, `zh_map_apply`).
    (
        "allow a copy (copy=True)",
        "allow a copy (ZH_MAP_ALLOW_COPY)",
    ),
    // A tensor with negative strides, adopted by `zh_table_from_columns`, exported: the C
    // calls make no compact copy of an adopted column.
    (
        "Ask for a copy (copy=True) to export a compact tensor",
        "Adopt a tensor with non-negative strides (zh_table_from_columns) instead",
    ),
    ("which has no streams: name none", "which has no streams; pass 0"),
];

/// `message` with the core's Python spellings in C's.
pub(crate) fn in_c_terms(message: String) -> String {
    IN_C_TERMS.iter().fold(message, |text, (core, c)| {
        if text.contains(core) {
            text.replace(core, c)
        } else {
            text
        }
    })
}
