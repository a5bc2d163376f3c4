use std::path::PathBuf;

use super::error::{ConfKind, ConfigError};
use super::parse::ConfigFile;
use super::ranges::check_scale;
use crate::settings::{Scenario, TestMode, TestSettings};

/// Where the settings of a command-line run come from.
#[derive(Clone, Debug, PartialEq)]
pub struct SettingsSources {
    /// The model whose keys apply (`model.Scenario.key`).
    pub model: String,
    /// The scenario whose keys apply.
    pub scenario: Scenario,
    /// Replaces the built-in mlperf.conf as a whole; `None` = built-in.
    pub mlperf_conf: Option<PathBuf>,
    /// The user.conf applied over mlperf.conf; `None` = none.
    pub user_conf: Option<PathBuf>,
    /// Wins over any `mode` key of the config files.
    pub mode: Option<TestMode>,
    /// The memory of the machine the run is for, which bounds the counts
    /// the files may ask for; `None`: unknown.
    pub memory: Option<u64>,
}

impl SettingsSources {
    /// Defaults < mlperf.conf < user.conf < explicit mode. The scenario is
    /// set first and never changed by the files.
    pub fn resolve(&self) -> Result<TestSettings, ConfigError> {
        let mut settings = TestSettings {
            scenario: self.scenario,
            ..TestSettings::default()
        };
        let rules = match &self.mlperf_conf {
            Some(path) => ConfigFile::read(path)?,
            None => ConfigFile::builtin()?,
        };
        rules.apply(
            &mut settings,
            &self.model,
            self.scenario,
            ConfKind::MlperfConf,
        )?;
        if self.mlperf_conf.is_some() {
            rules.check_values(&self.model, self.scenario, self.memory)?;
        }
        if let Some(path) = &self.user_conf {
            let user = ConfigFile::read(path)?;
            user.check_known_keys()?;
            user.check_values(&self.model, self.scenario, self.memory)?;
            user.apply(
                &mut settings,
                &self.model,
                self.scenario,
                ConfKind::UserConf,
            )?;
        }
        if let Some(mode) = self.mode {
            settings.mode = mode;
        }
        check_scale(&settings, self.memory)?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_layers_sources() {
        let dir = testkit::Scratch::new("loadgen-config");
        let user = dir.join("user.conf");
        std::fs::write(&user, "*.*.mode = 1\nresnet50.Offline.target_qps = 250\n").unwrap();
        let mut src = SettingsSources {
            model: "resnet50".into(),
            scenario: Scenario::Offline,
            mlperf_conf: None,
            user_conf: Some(user.clone()),
            mode: None,
            memory: None,
        };
        let s = src.resolve().unwrap();
        assert_eq!(s.scenario, Scenario::Offline);
        assert_eq!(s.mode, TestMode::AccuracyOnly);
        assert_eq!(s.offline_expected_qps, 250.0);
        assert_eq!(s.min_query_count, 24576);
        assert_eq!(s.qsl_rng_seed, 2085463073848966840);

        src.mode = Some(TestMode::PerformanceOnly);
        assert_eq!(src.resolve().unwrap().mode, TestMode::PerformanceOnly);

        // A given mlperf.conf replaces the built-in one completely.
        let rules = dir.join("mlperf.conf");
        std::fs::write(&rules, "*.*.qsl_rng_seed = 5\n").unwrap();
        src.mlperf_conf = Some(rules);
        let s = src.resolve().unwrap();
        assert_eq!(s.qsl_rng_seed, 5);
        assert_eq!(s.min_query_count, 100);

        src.user_conf = Some(dir.join("missing.conf"));
        let err = src.resolve().unwrap_err();
        assert!(err.is_not_found());
        assert!(err.to_string().contains("missing.conf"), "{err}");

        std::fs::write(&user, "*.*.mode = 1 # accuracy\n").unwrap();
        src.user_conf = Some(user);
        let err = src.resolve().unwrap_err();
        assert!(err.is_syntax());
        assert!(err.to_string().contains("user.conf:1:"), "{err}");
    }
}
