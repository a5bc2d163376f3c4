use std::collections::HashMap;
use std::path::Path;

use super::error::ConfigError;
use crate::c_number::is_complete_number;

/// The mlperf.conf compiled into the engine; used unless a file replaces it.
pub(crate) const BUILTIN_MLPERF_CONF: &str = include_str!("../../mlperf.conf");

/// Display name of the built-in mlperf.conf in error messages.
pub(crate) const BUILTIN_MLPERF_CONF_NAME: &str = "mlperf.conf (built-in)";

/// One stored `key = value` pair and the line that set it last.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Entry {
    pub(super) value: String,
    pub(super) line: usize,
}

/// A syntactically valid config file: its keys and their value texts.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigFile {
    pub(super) name: String,
    pub(super) entries: HashMap<String, Entry>,
}

/// Whitespace as C `isspace` sees it in the "C" locale.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

impl ConfigFile {
    /// Parses config text. `name` is used in error messages. Every line is
    /// checked, so all syntax errors are reported together.
    pub fn parse(name: &str, text: &str) -> Result<ConfigFile, Vec<ConfigError>> {
        let mut entries = HashMap::new();
        let mut errors = Vec::new();
        for (idx, line) in text.split('\n').enumerate() {
            let line_no = idx + 1;
            // 0 = expect key, 1 = expect '=', 2 = expect value(s).
            let mut state = 0;
            let mut key = "";
            for token in line.split(is_c_space).filter(|t| !t.is_empty()) {
                match state {
                    0 | 1 if token == "#" => break,
                    0 => {
                        key = token;
                        state = 1;
                    }
                    1 if token == "=" => state = 2,
                    1 => {
                        errors.push(ConfigError::ExpectedEquals {
                            file: name.to_string(),
                            line: line_no,
                            key: key.to_string(),
                            found: token.to_string(),
                        });
                        break;
                    }
                    _ => {
                        if !is_complete_number(token) {
                            errors.push(ConfigError::NotANumber {
                                file: name.to_string(),
                                line: line_no,
                                key: key.to_string(),
                                value: token.to_string(),
                            });
                            break;
                        }
                        // Stay in state 2: of `a = 1 2` the last value wins.
                        entries.insert(
                            key.to_string(),
                            Entry {
                                value: token.to_string(),
                                line: line_no,
                            },
                        );
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(ConfigFile {
                name: name.to_string(),
                entries,
            })
        } else {
            Err(errors)
        }
    }

    /// Reads and parses a file. Syntax errors come back as
    /// [`ConfigError::Invalid`] holding every error of the file.
    pub fn read(path: impl AsRef<Path>) -> Result<ConfigFile, ConfigError> {
        let path = path.as_ref();
        let bytes =
            crate::disk::read_bounded(path, crate::disk::MAX_TEXT_FILE).map_err(|cause| {
                ConfigError::NotFound {
                    path: path.to_path_buf(),
                    cause,
                }
            })?;
        // Byte-oriented like the official LoadGen: invalid UTF-8 can only be in keys or
        // values, which then fail to match or to parse as numbers.
        let text = String::from_utf8_lossy(&bytes);
        let name = path.display().to_string();
        ConfigFile::parse(&name, &text)
            .map_err(|errors| ConfigError::Invalid { file: name, errors })
    }

    /// The built-in mlperf.conf.
    pub fn builtin() -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse(BUILTIN_MLPERF_CONF_NAME, BUILTIN_MLPERF_CONF).map_err(|errors| {
            ConfigError::Invalid {
                file: BUILTIN_MLPERF_CONF_NAME.to_string(),
                errors,
            }
        })
    }

    /// The name used in error messages (the path for files read from disk).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value text stored for a full key such as `*.Server.target_qps`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(|e| e.value.as_str())
    }

    /// Every key and its value text, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|(k, e)| (k.as_str(), e.value.as_str()))
    }

    /// The models the file names in its keys (`*` left out), sorted.
    pub fn models(&self) -> Vec<&str> {
        let mut models: Vec<&str> = self
            .entries
            .keys()
            // model.scenario.name, where only the model may hold dots
            // (wan-2.2-t2v-a14b).
            .filter_map(|k| k.rsplitn(3, '.').nth(2))
            .filter(|m| *m != "*")
            .collect();
        models.sort_unstable();
        models.dedup();
        models
    }

    /// Number of distinct keys in the file.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the file sets nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Finds `name` for `model` under `scenario`; the most specific key wins,
    /// and a scenario wildcard beats a model wildcard.
    pub(super) fn lookup(
        &self,
        model: &str,
        scenario: &str,
        name: &str,
    ) -> Option<(String, &Entry)> {
        [
            format!("{model}.{scenario}.{name}"),
            format!("*.{scenario}.{name}"),
            format!("{model}.*.{name}"),
            format!("*.*.{name}"),
        ]
        .into_iter()
        .find_map(|k| self.entries.get(&k).map(|e| (k, e)))
    }
}

/// `text` as a user.conf, for the tests of every room.
#[cfg(test)]
pub(super) fn user_conf(text: &str) -> Result<ConfigFile, Vec<ConfigError>> {
    ConfigFile::parse("user.conf", text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse::user_conf as parse;

    #[test]
    fn builtin_parses() {
        let f = ConfigFile::builtin().expect("built-in mlperf.conf must parse");
        assert_eq!(f.get("*.*.qsl_rng_seed"), Some("2085463073848966840"));
        assert!(f.len() > 100);
        let models = f.models();
        for m in ["resnet50", "wan-2.2-t2v-a14b", "llama3_1-8b", "yolo"] {
            assert!(models.contains(&m), "{m}: {models:?}");
        }
        assert!(!models.contains(&"*") && !models.contains(&"wan-2"));
    }

    #[test]
    fn line_syntax() {
        let f = parse("a=1\nb = 2\n# c = 3\nd = \ne # = 4\n f  =  0x10 \t\r\ng = 1 2\n").unwrap();
        assert_eq!(f.get("a=1"), None);
        assert_eq!(f.get("b"), Some("2"));
        assert_eq!(f.get("c"), None);
        assert_eq!(f.get("d"), None);
        assert_eq!(f.get("e"), None);
        assert_eq!(f.get("f"), Some("0x10"));
        assert_eq!(f.get("g"), Some("2"));
        assert_eq!(f.len(), 3);
    }

    #[test]
    fn all_errors_reported_with_lines() {
        let errs = parse("a = 1 # x\nok = 1\nb =2\nc = abc\nd = 1 =\n").unwrap_err();
        let lines: Vec<_> =
            errs.iter()
                .map(|e| match e {
                    ConfigError::ExpectedEquals { line, .. }
                    | ConfigError::NotANumber { line, .. } => *line,
                    _ => 0,
                })
                .collect();
        assert_eq!(lines, [1, 3, 4, 5]);
        let msg = errs[0].to_string();
        assert!(
            msg.starts_with("user.conf:1: value needs to be integer or double"),
            "{msg}"
        );
        assert!(msg.contains("comment"), "{msg}");
        assert_eq!(
            errs[1].to_string(),
            "user.conf:3: expected 'key = value' with spaces around '=', found `=2` after key `b`"
        );
        assert_eq!(errs[1].detail_messages(), ["expected 'key=value', line=3"]);
        assert_eq!(
            errs[2].detail_messages(),
            ["value needs to be integer or double, line=4"]
        );
    }
}
