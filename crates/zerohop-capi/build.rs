//! Gives the shared library a SONAME on Linux, as system libraries have: a program linked to
//! it records the ABI it needs (`libzerohop_capi.so.0.MINOR` before 1.0, whose minor versions
//! may break it; `.so.MAJOR` after), and scripts/install.sh installs the file under that name.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let abi = if major == "0" {
        format!("0.{}", env!("CARGO_PKG_VERSION_MINOR"))
    } else {
        major.to_owned()
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libzerohop_capi.so.{abi}");
}
