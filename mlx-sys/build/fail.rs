//! One clear message per failure, shown by cargo as an error of this build script.

use std::fmt::Display;

/// Why the build cannot go on, in words for the person running cargo.
pub struct Fail(pub String);

impl Fail {
    /// Reports the failure to cargo and ends the build script.
    pub fn exit(self) -> ! {
        // One line per message: cargo prints each `cargo::error` as an error.
        for line in self.0.lines() {
            println!("cargo::error={line}");
        }
        std::process::exit(1);
    }
}

/// Maps an error into a [`Fail`] with the given description.
pub fn or_fail<T, E: Display>(r: Result<T, E>, msg: impl FnOnce(E) -> String) -> Result<T, Fail> {
    r.map_err(|e| Fail(msg(e)))
}
