//! include/zerohop.h is what cbindgen makes of this crate today: a stale header fails here.
//! `ZEROHOP_WRITE_HEADER=1 cargo test -p zerohop-capi --test header` rewrites it.

use std::path::Path;

#[test]
#[cfg_attr(miri, ignore = "cbindgen parses the sources: not what Miri is for")]
fn the_checked_in_header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not read the crate");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = crate_dir.join("../../include/zerohop.h");
    if std::env::var_os("ZEROHOP_WRITE_HEADER").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/zerohop.h is out of date with crates/zerohop-capi: run \
         ZEROHOP_WRITE_HEADER=1 cargo test -p zerohop-capi --test header and commit it"
    );
}
