//! With the `official-loadgen` feature: compiles the official LoadGen from
//! the unaltered source tree `MLPERF_LOADGEN_SRC` names, with loadgen-node's
//! adapter (official/adapter.cc), and records how that tree compares with
//! the published 6.0.17 file list (official/loadgen-6.0.17.sha1).

/// The status that tells cargo the build script failed.
#[cfg(feature = "official-loadgen")]
const BUILD_FAILED: i32 = 1;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "official-loadgen")]
    if let Err(e) = official::build() {
        eprintln!("\nerror: loadgen-node's official-loadgen feature: {e}\n");
        std::process::exit(BUILD_FAILED);
    }
}

#[cfg(feature = "official-loadgen")]
mod official {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use sha1::{Digest, Sha1};

    /// The official LoadGen's library sources, as its setup.py compiles them
    /// (without the Python and C bindings, which loadgen-node does not use).
    const SOURCES: [&str; 8] = [
        "early_stopping.cc",
        "issue_query_controller.cc",
        "loadgen.cc",
        "logging.cc",
        "test_settings_internal.cc",
        "utils.cc",
        "version.cc",
        "results.cc",
    ];

    const PUBLISHED: &str = include_str!("official/loadgen-6.0.17.sha1");

    pub fn build() -> Result<(), String> {
        println!("cargo:rerun-if-env-changed=MLPERF_LOADGEN_SRC");
        println!("cargo:rerun-if-changed=official/adapter.cc");
        println!("cargo:rerun-if-changed=official/loadgen-6.0.17.sha1");
        let src = std::env::var_os("MLPERF_LOADGEN_SRC")
            .map(PathBuf::from)
            .ok_or(
                "set MLPERF_LOADGEN_SRC to the official LoadGen's source tree (the loadgen/ \
             folder of a tagged mlcommons/inference checkout, or the extracted \
             mlcommons-loadgen 6.0.17 sdist); deploy/official-loadgen.sh fetches, checks \
             and builds it",
            )?;
        let src = src
            .canonicalize()
            .map_err(|e| format!("MLPERF_LOADGEN_SRC={}: {e}", src.display()))?;

        let check = check_tree(&src)?;
        for line in &check.differences {
            println!(
                "cargo:warning=official LoadGen tree {}: {line}",
                src.display()
            );
        }
        println!("cargo:rustc-env=LGN_SRC={}", src.display());
        println!(
            "cargo:rustc-env=LGN_TREE_MATCHES={}",
            check.differences.is_empty() as u8
        );
        println!(
            "cargo:rustc-env=LGN_TREE_DIFFERENCES={}",
            check.differences.join("; ")
        );
        println!("cargo:rustc-env=LGN_TREE_FILES={}", check.files);

        let out = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?);
        let version_cc = generate_version(&src, &out)?;
        let version = std::fs::read_to_string(src.join("VERSION.txt"))
            .map_err(|e| format!("{}: {e}", src.join("VERSION.txt").display()))?;
        let mut parts = version.trim().split('.');
        let (major, minor) = (parts.next().unwrap_or("0"), parts.next().unwrap_or("0"));

        let mut build = cc::Build::new();
        build
            .cpp(true)
            .std("c++14")
            .opt_level(3)
            .include(&src)
            .define("MAJOR_VERSION", major)
            .define("MINOR_VERSION", minor)
            // Their code, their warnings: not ours to fix.
            .warnings(false);
        for f in SOURCES {
            build.file(src.join(f));
        }
        build.file(&version_cc);
        build.file("official/adapter.cc");
        build
            .try_compile("mlperf_loadgen_official")
            .map_err(|e| format!("compiling the official LoadGen failed: {e}"))?;
        println!("cargo:rustc-link-lib=pthread");
        Ok(())
    }

    struct TreeCheck {
        /// Files compared.
        files: usize,
        /// One line per file that differs from the published list.
        differences: Vec<String>,
    }

    /// Every file of the published list must exist; each one whose SHA-1
    /// differs is reported (the build goes on, and every run warns).
    fn check_tree(src: &Path) -> Result<TreeCheck, String> {
        let mut files = 0;
        let mut differences = Vec::new();
        for (n, line) in PUBLISHED.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (sha, name) = line
                .split_once(' ')
                .ok_or_else(|| format!("official/loadgen-6.0.17.sha1:{}: malformed", n + 1))?;
            let path = src.join(name);
            println!("cargo:rerun-if-changed={}", path.display());
            let data = std::fs::read(&path).map_err(|e| {
                format!(
                    "{} is missing from the LoadGen tree ({e}); is {} the loadgen/ folder of \
                     an official release?",
                    name,
                    src.display()
                )
            })?;
            files += 1;
            let got = hex(&Sha1::digest(&data));
            if got != sha {
                differences.push(format!("{name} differs (sha1 {got}, published {sha})"));
            }
        }
        Ok(TreeCheck { files, differences })
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The release's own version_generator.py writes the version, build date,
    /// git facts and file hashes the LoadGen logs; it runs with the tree as
    /// its root and writes into OUT_DIR, never into the tree.
    fn generate_version(src: &Path, out: &Path) -> Result<PathBuf, String> {
        let cc = out.join("version_generated.cc");
        let status = Command::new("python3")
            .arg("-B")
            .arg(src.join("version_generator.py"))
            .arg(&cc)
            .arg(src)
            .status()
            .map_err(|e| format!("cannot run python3 for version_generator.py: {e}"))?;
        if !status.success() {
            return Err(format!(
                "{} failed ({status})",
                src.join("version_generator.py").display()
            ));
        }
        Ok(cc)
    }
}
