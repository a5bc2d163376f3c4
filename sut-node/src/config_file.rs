//! `sut-node serve --config FILE.toml`: options from a TOML file.
//!
//! Each key is a long flag of `serve` (or one of its former names) without
//! its dashes (`max_batch_size` or `max-batch-size`), each value that flag's
//! value. The file's options are
//! placed before those of the command line, which therefore win.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why a `--config` file could not become options.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    /// The file could not be read.
    Read {
        /// The config file.
        path: PathBuf,
        /// The read's error.
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    /// The file is not valid TOML.
    Parse {
        /// The config file.
        path: PathBuf,
        /// The TOML parser's message.
        message: String,
    },
    #[error("{}{}: unknown key `{key}` (not an option of `sut-node serve`; see --help)", path.display(), line_suffix(*line))]
    /// A key that names no option of `sut-node serve`.
    UnknownKey {
        /// The config file.
        path: PathBuf,
        /// The key's line (1-based), when known.
        line: Option<usize>,
        /// The key as written.
        key: String,
    },
    #[error("{}{}: key `{key}`: {why}", path.display(), line_suffix(*line))]
    /// A value of the wrong kind for its option.
    BadValue {
        /// The config file.
        path: PathBuf,
        /// The key's line (1-based), when known.
        line: Option<usize>,
        /// The key as written.
        key: String,
        /// What is wrong with its value.
        why: String,
    },
    #[error("{}: larger than {MAX_CONFIG_BYTES} bytes; not a sut-node config file", path.display())]
    /// The file is over [`MAX_CONFIG_BYTES`].
    TooLarge {
        /// The config file.
        path: PathBuf,
    },
    #[error("--config needs a file name")]
    /// `--config` came last, without its value.
    MissingFile,
}

fn line_suffix(line: Option<usize>) -> String {
    line.map(|l| format!(":{l}")).unwrap_or_default()
}

/// The largest config file read; anything bigger is not one.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// `args` (the whole command line, program name first) with the options of
/// `serve --config FILE` inserted right after `serve`. `serve` is the clap
/// command of `serve`, whose flags and value parsers check the file's keys
/// and values. Other command lines come back unchanged.
pub fn args_with_config(
    args: impl IntoIterator<Item = OsString>,
    serve: &clap::Command,
) -> Result<Vec<OsString>, ConfigError> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    if args.get(1).map(|a| a != "serve").unwrap_or(true) {
        return Ok(args);
    }
    let Some(path) = config_path(&args[2..])? else {
        return Ok(args);
    };
    let options = options_from_file(&path, serve)?;
    args.splice(2..2, options);
    Ok(args)
}

/// The value of the last `--config FILE` or `--config=FILE`, if any.
fn config_path(args: &[OsString]) -> Result<Option<PathBuf>, ConfigError> {
    let mut path = None;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].to_string_lossy();
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            path = Some(PathBuf::from(
                args.get(i + 1).ok_or(ConfigError::MissingFile)?,
            ));
            i += 1;
        } else if let Some(value) = arg.strip_prefix("--config=") {
            path = Some(PathBuf::from(value));
        }
        i += 1;
    }
    Ok(path)
}

/// The command-line options a config file stands for.
pub fn options_from_file(path: &Path, serve: &clap::Command) -> Result<Vec<OsString>, ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    // Bounded, so that a device or a huge file cannot exhaust memory.
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text))
        .map_err(read_err)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
    let mut options = Vec::new();
    for (key, value) in &table {
        let flag = key.replace('_', "-");
        let line = line_of(&text, key);
        // A flag's former names (its aliases) stay valid keys, as on the
        // command line.
        let arg = serve
            .get_arguments()
            .find(|a| {
                a.get_long() == Some(flag.as_str())
                    || a.get_all_aliases()
                        .is_some_and(|names| names.contains(&flag.as_str()))
            })
            .filter(|_| flag != "config");
        let Some(arg) = arg else {
            return Err(ConfigError::UnknownKey {
                path: path.to_path_buf(),
                line,
                key: key.clone(),
            });
        };
        let bad = |why: String| ConfigError::BadValue {
            path: path.to_path_buf(),
            line,
            key: key.clone(),
            why,
        };
        // Checked here with the flag's own parser, so that the error names
        // this file and line rather than only the flag.
        let switch = !arg.get_action().takes_values();
        let check = |text: String| -> Result<OsString, ConfigError> {
            if switch {
                return Err(bad("an on/off option: write true or false".into()));
            }
            let option: OsString = format!("--{flag}={text}").into();
            // Parsed alone, so only what other options must add may be missing.
            let parsed = serve
                .clone()
                .no_binary_name(true)
                .try_get_matches_from([option.clone()]);
            match parsed {
                Err(e) if e.kind() != clap::error::ErrorKind::MissingRequiredArgument => {
                    Err(bad(clap_reason(&e)))
                }
                _ => Ok(option),
            }
        };
        let values = match value {
            toml::Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for value in values {
            match value {
                toml::Value::Boolean(_) if !switch => {
                    return Err(bad("needs a value, not true or false".into()))
                }
                toml::Value::Boolean(true) => options.push(format!("--{flag}").into()),
                toml::Value::Boolean(false) => {}
                toml::Value::String(s) => options.push(check(s.clone())?),
                toml::Value::Integer(n) => options.push(check(n.to_string())?),
                toml::Value::Float(x) => options.push(check(x.to_string())?),
                toml::Value::Array(_) => return Err(bad("nested arrays are not options".into())),
                toml::Value::Table(_) => return Err(bad("tables are not options".into())),
                toml::Value::Datetime(_) => return Err(bad("dates are not options".into())),
            }
        }
    }
    Ok(options)
}

/// The reason of a value parser's error, without clap's decoration.
fn clap_reason(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// The line where `key` is set, for error messages.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|line| {
            line.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> clap::Command {
        use clap::{value_parser, Arg, ArgAction};
        clap::Command::new("serve").args([
            Arg::new("backend").long("backend"),
            Arg::new("model").long("model"),
            Arg::new("max-batch-size")
                .long("max-batch-size")
                .value_parser(value_parser!(u32).range(1..=65536)),
            Arg::new("no-quic")
                .long("no-quic")
                .action(ArgAction::SetTrue),
            Arg::new("listen").long("listen"),
            Arg::new("server-url").long("server-url").alias("upstream"),
            Arg::new("config").long("config"),
        ])
    }

    #[test]
    fn a_former_flag_name_is_still_a_key() {
        let (_dir, path) = write("upstream = \"h:1\"\nserver_url = \"h:2\"\n");
        let mut options = strings(&options_from_file(&path, &known()).unwrap());
        options.sort();
        assert_eq!(options, ["--server-url=h:2", "--upstream=h:1"]);
        let (_dir, path) = write("upstreams = \"h:1\"\n");
        let err = options_from_file(&path, &known()).unwrap_err().to_string();
        assert!(err.contains("unknown key `upstreams`"), "{err}");
    }

    fn write(text: &str) -> (tempdir::Dir, PathBuf) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("node.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let path = std::env::temp_dir().join(format!(
                    "sut-node-config-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn file_options_go_before_the_command_line() {
        let (_dir, path) = write(
            "backend = \"onnx\"\nmax_batch_size = 8\nno-quic = true\nmodel = \"/m/r.onnx\"\n",
        );
        let args = [
            "sut-node",
            "serve",
            "--config",
            path.to_str().unwrap(),
            "--max-batch-size",
            "4",
        ]
        .map(OsString::from);
        let out = strings(&args_with_config(args, &known()).unwrap());
        assert_eq!(out[..2], ["sut-node", "serve"]);
        let mut from_file = out[2..6].to_vec();
        from_file.sort();
        assert_eq!(
            from_file,
            [
                "--backend=onnx",
                "--max-batch-size=8",
                "--model=/m/r.onnx",
                "--no-quic"
            ]
        );
        assert_eq!(
            out[6..],
            ["--config", path.to_str().unwrap(), "--max-batch-size", "4"]
        );
    }

    #[test]
    fn other_command_lines_are_unchanged() {
        let args = ["sut-node", "health", "--config", "x"].map(OsString::from);
        assert_eq!(
            args_with_config(args.clone(), &known()).unwrap(),
            args.to_vec()
        );
        let args = ["sut-node", "serve", "--backend", "synthetic"].map(OsString::from);
        assert_eq!(
            args_with_config(args.clone(), &known()).unwrap(),
            args.to_vec()
        );
    }

    #[test]
    fn unknown_keys_bad_values_and_bad_toml_name_the_file_and_line() {
        let (_dir, path) = write("backend = \"onnx\"\n\nmax_batch = 8\n");
        let err = options_from_file(&path, &known()).unwrap_err().to_string();
        assert!(
            err.contains("node.toml:3: unknown key `max_batch`"),
            "{err}"
        );

        let (_dir, path) = write("model = { path = \"x\" }\n");
        let err = options_from_file(&path, &known()).unwrap_err().to_string();
        assert!(err.contains("node.toml:1: key `model`: tables"), "{err}");

        let (_dir, path) = write("backend = onnx\n");
        let err = options_from_file(&path, &known()).unwrap_err().to_string();
        assert!(err.contains("node.toml") && err.contains("line 1"), "{err}");

        let err = options_from_file(Path::new("/nonexistent/n.toml"), &known())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("/nonexistent/n.toml: cannot read"), "{err}");

        let (_dir, path) = write("config = \"other.toml\"\n");
        assert!(matches!(
            options_from_file(&path, &known()),
            Err(ConfigError::UnknownKey { .. })
        ));
    }

    #[test]
    fn values_are_checked_by_their_flag_naming_file_and_line() {
        let (_dir, path) = write("backend = \"x\"\nmax_batch_size = 1000000000\n");
        let err = options_from_file(&path, &known()).unwrap_err().to_string();
        assert!(
            err.contains("node.toml:2: key `max_batch_size`: invalid value '1000000000'"),
            "{err}"
        );
        let (_dir, path) = write("max_batch_size = \"eight\"\n");
        let err = options_from_file(&path, &known()).unwrap_err().to_string();
        assert!(err.contains("node.toml:1: key `max_batch_size`"), "{err}");
        let (_dir, path) = write("no_quic = 1\n");
        let err = options_from_file(&path, &known()).unwrap_err().to_string();
        assert!(
            err.contains("node.toml:1: key `no_quic`: an on/off"),
            "{err}"
        );
        let (_dir, path) = write("model = true\n");
        let err = options_from_file(&path, &known()).unwrap_err().to_string();
        assert!(
            err.contains("node.toml:1: key `model`: needs a value"),
            "{err}"
        );
    }

    #[test]
    fn reading_is_bounded() {
        let err = options_from_file(Path::new("/dev/zero"), &known()).unwrap_err();
        assert!(matches!(err, ConfigError::TooLarge { .. }), "{err}");
        let (_dir, path) = write(&"# padding\n".repeat(MAX_CONFIG_BYTES as usize / 10 + 1));
        let err = options_from_file(&path, &known()).unwrap_err();
        assert!(matches!(err, ConfigError::TooLarge { .. }), "{err}");
    }
}
