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
    (
        "which has no streams: name none",
        "which has no streams; pass 0",
    ),
    (
        "copy=True (a private, reported copy)",
        "ZH_MAP_ALLOW_COPY (a private copy, reported by zh_tensors_copied)",
    ),
    (
        "share_readonly=True (the same memory, on your word that nothing writes to it through \
         torch)",
        "ZH_MAP_SHARE_READONLY (the same memory, on your word that nothing writes to it \
         through libtorch), ZH_MAP_GUARD_CONST (the same memory, checked afterwards)",
    ),
    (
        "or take it through NumPy, JAX or zerohop tensors, which keep it read-only",
        "or map without ZH_MAP_FOR_LIBTORCH for a consumer that honours the read-only flag",
    ),
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
